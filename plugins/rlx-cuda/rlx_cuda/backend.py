"""The CUDA backend: NVRTC-generated kernels, cuBLAS GEMMs, cuFFT and CuPy, one arena
per compiled graph, CUDA graph replay."""
from __future__ import annotations

from typing import Mapping

from rlx_core.ir import Graph, Node
from rlx_core.runtime import Availability, Backend, CompileOptions, Device

from . import support
from .probe import probe

__all__ = ["CudaBackend"]


class CudaBackend(Backend):
    name = "cuda"
    device = Device.CUDA

    def is_available(self) -> Availability:
        return probe()

    def supported_ops(self) -> Mapping[str, None]:
        return support.supported_ops()

    def check_node(self, node: Node) -> str | None:
        return support.check_node(node)

    def advisory_capabilities(self) -> frozenset[str]:
        return frozenset({"gpu_handles", "typed_io", "async_pipeline", "out_buffers", "dlpack", "control_flow",
                          "fused_elementwise", "graph_capture"})

    def memory_capacity(self) -> int | None:
        """The GPU's memory (``totalGlobalMem``), not the host's: what a plan must fit."""
        detail = probe().detail or {}
        return detail.get("memory_bytes")

    def compile(self, graph: Graph, options: CompileOptions):
        from .executable import CudaExecutable
        return CudaExecutable(graph, options)

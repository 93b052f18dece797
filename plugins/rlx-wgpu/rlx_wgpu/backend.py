"""The wgpu backend: one class serving the five device profiles (see ``rlx_wgpu.gpu``)."""
from __future__ import annotations

from typing import Mapping

from rlx_core.errors import DeviceError
from rlx_core.ir import Graph, Node
from rlx_core.runtime import Availability, Backend, CompileOptions, Device

from .gpu import PROFILES, open_gpu

__all__ = ["WgpuBackend"]


class WgpuBackend(Backend):
    def __init__(self, label: str):
        self.profile = PROFILES[label]
        self.name = "wgpu" if label == "gpu" else f"wgpu-{label}"
        self.device = Device(label)
        self._gpu = None

    @property
    def gpu(self):
        """The opened device (opened on first use; raises DeviceError if it cannot be)."""
        if self._gpu is None:
            self._gpu = open_gpu(self.profile.label)
        return self._gpu

    def is_available(self) -> Availability:
        try:
            gpu = self.gpu
        except Exception as e:  # no adapter of this backend type, no driver, no wgpu
            return Availability(False, f"{type(e).__name__}: {e}")
        return Availability(True, gpu.summary(), gpu.describe())

    def supported_ops(self) -> Mapping[str, object]:
        from .support import supported_ops
        return supported_ops(self._f16())

    def check_node(self, node: Node) -> str | None:
        from .support import check_node
        return check_node(node, self.gpu)

    def advisory_capabilities(self) -> frozenset[str]:
        from .executable import WgpuExecutable
        return WgpuExecutable.capabilities

    def compile(self, graph: Graph, options: CompileOptions):
        from .executable import WgpuExecutable
        unknown = set(options.backend) - {"matmul_tile"}
        if unknown:
            raise DeviceError(f"unknown wgpu backend option(s) {sorted(unknown)}; known: matmul_tile")
        return WgpuExecutable(graph, options, self.gpu)

    def _f16(self) -> bool:
        try:
            return self.gpu.f16
        except Exception:
            return False

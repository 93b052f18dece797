"""The CPU backend: every op kind of the reference, compiled to a planned executable."""
from __future__ import annotations

import os
import platform
from typing import Mapping

from rlx_core.ir import Graph, all_schemas
from rlx_core.reference import has_kernel
from rlx_core.runtime import Availability, Backend, CompileOptions, Device, ExecutableGraph, registry

__all__ = ["CpuBackend", "CAPABILITIES"]

# What compiled graphs can do (see rlx_core.runtime.CAPABILITIES).
CAPABILITIES = frozenset({"clone", "typed_io", "out_buffers", "control_flow", "fused_elementwise"})


class CpuBackend(Backend):
    name = "cpu"
    device = Device.CPU

    def is_available(self) -> Availability:
        return Availability(True, f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads",
                            {"machine": platform.machine(), "threads": os.cpu_count()})

    def supported_ops(self) -> Mapping[str, None]:
        # Every kind the reference defines, on every dtype its schema accepts.
        return {kind: None for kind in all_schemas() if has_kernel(kind)}

    def advisory_capabilities(self) -> frozenset[str]:
        return CAPABILITIES

    def compile(self, graph: Graph, options: CompileOptions) -> ExecutableGraph:
        from .executable import CpuExecutable  # numba and the kernels: loaded on the first compile
        return CpuExecutable(graph, options, registry().op_kernels(self.name))

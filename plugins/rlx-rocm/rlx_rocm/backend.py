"""The rocm backend: OpenCL devices through pyopencl (see ``rlx_rocm.opencl`` for which)."""
from __future__ import annotations

from typing import Mapping

from rlx_core.ir import Graph, Node
from rlx_core.runtime import Availability, Backend, CompileOptions, Device

__all__ = ["RocmBackend"]


class RocmBackend(Backend):
    name = "rocm"
    device = Device("rocm")

    @property
    def dev(self):
        """The opened OpenCL device the current settings pick (raises DeviceUnavailableError)."""
        from .opencl import open_device
        return open_device()

    def is_available(self) -> Availability:
        try:
            dev = self.dev
        except Exception as e:  # no pyopencl, no platform, no AMD GPU, a driver that fails to open
            return Availability(False, f"{type(e).__name__}: {e}" if not hasattr(e, "args") or not e.args
                                else str(e))
        return dev.availability()

    def supported_ops(self) -> Mapping[str, object]:
        from .support import supported_ops
        return supported_ops(self._fp64())

    def check_node(self, node: Node) -> str | None:
        from .support import check_node
        return check_node(node, self._fp64())

    def advisory_capabilities(self) -> frozenset[str]:
        from .executable import RocmExecutable
        return RocmExecutable.capabilities

    def compile(self, graph: Graph, options: CompileOptions):
        from .executable import RocmExecutable
        return RocmExecutable(graph, options, self.dev)

    def _fp64(self) -> bool:
        try:
            return bool(self.dev.fp64)
        except Exception:
            return False

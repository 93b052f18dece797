"""The wgpu backend: one class serving the five device profiles (see ``rlx_wgpu.gpu``),
built on :class:`DeviceBackend`, which compiles for any :class:`~rlx_wgpu.gpu.Profile`
(public as ``rlx_wgpu.api.DeviceBackend`` / ``DeviceSpec``)."""
from __future__ import annotations

from typing import Mapping

from rlx_core.errors import DeviceError
from rlx_core.ir import Graph, Node
from rlx_core.runtime import Availability, Backend, CompileOptions, Device

from .gpu import PROFILES, Profile, open_profile

__all__ = ["WgpuBackend", "DeviceBackend"]


class DeviceBackend(Backend):
    """A Backend compiling with rlx-wgpu's code generation for the device ``spec`` opens.

    Subclasses may override :meth:`device_spec` (the spec to open now, e.g. from an
    environment variable), :meth:`is_available` (platform checks first), and
    :meth:`overrides` (nodes to run with host kernels); ``option_names`` lists the
    ``CompileOptions.backend`` keys accepted (the keys rlx-wgpu reads plus the
    subclass's own, which :meth:`compile` leaves to the subclass).
    """

    option_names: tuple[str, ...] = ("matmul_tile",)

    def __init__(self, name: str, device: Device | str, spec: Profile | None = None):
        self.name = name
        self.device = device if isinstance(device, Device) else Device(device)
        self.spec = spec

    def device_spec(self) -> Profile:
        """The spec of the device to open (default: the one given to the constructor)."""
        if self.spec is None:
            raise DeviceError(f"backend '{self.name}' has no device spec")
        return self.spec

    @property
    def gpu(self):
        """The opened device (opened on first use, process-wide per spec; raises
        DeviceError if it cannot be)."""
        return open_profile(self.device_spec())

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
        """The executable's capabilities, less ``async_pipeline`` for a spec that maps its
        arena where the adapter allows (``unified_memory``, e.g. metal on Apple silicon):
        such runs write and read the idle arena through a mapping, so submit waits.
        Advisory (the adapter is not opened here): executables on a software adapter drop
        ``async_pipeline`` too (``executable.queues``)."""
        from .executable import WgpuExecutable
        if self.device_spec().unified_memory:
            return WgpuExecutable.capabilities - {"async_pipeline"}
        return WgpuExecutable.capabilities

    def overrides(self, graph: Graph, options: CompileOptions):
        """A callable ``(graph, node) -> host kernel | None`` for this compile, or None
        (the default: every node runs as generated WGSL)."""
        return None

    def compile(self, graph: Graph, options: CompileOptions):
        from .executable import WgpuExecutable
        unknown = set(options.backend) - set(self.option_names)
        if unknown:
            raise DeviceError(f"unknown {self.name} backend option(s) {sorted(unknown)}; known: "
                              f"{', '.join(self.option_names)}")
        return WgpuExecutable(graph, options, self.gpu, self.overrides(graph, options))

    def _f16(self) -> bool:
        try:
            return self.gpu.f16
        except Exception:
            return False


class WgpuBackend(DeviceBackend):
    def __init__(self, label: str):
        super().__init__("wgpu" if label == "gpu" else f"wgpu-{label}", Device(label), PROFILES[label])
        self.profile = PROFILES[label]

    def compile(self, graph: Graph, options: CompileOptions):
        unknown = set(options.backend) - {"matmul_tile"}
        if unknown:
            raise DeviceError(f"unknown wgpu backend option(s) {sorted(unknown)}; known: matmul_tile")
        return super().compile(graph, options)

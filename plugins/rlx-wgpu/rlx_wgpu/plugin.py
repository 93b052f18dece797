"""Entry-point module: cheap to import (no wgpu import here), it describes the five
devices this plugin serves -- one backend implementation, five device profiles -- and
provides the calibration hook."""
from __future__ import annotations

import sys

from rlx_core.runtime import Availability, BackendFactory, hookimpl

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)

_DESCRIPTIONS = {
    "gpu": "best GPU adapter through wgpu (WGSL compute)",
    "vulkan": "wgpu forced onto its Vulkan backend",
    "opengl": "wgpu forced onto its OpenGL backend",
    "directx": "wgpu forced onto its DirectX 12 backend",
    "webgpu": "portable WebGPU profile: spec-default limits, no optional features",
}
BACKEND_NAMES = {label: ("wgpu" if label == "gpu" else f"wgpu-{label}") for label in _DESCRIPTIONS}


def _factory(label: str) -> BackendFactory:
    def create():
        from .backend import WgpuBackend
        return WgpuBackend(label)

    def probe() -> Availability:
        if label == "directx" and sys.platform != "win32":
            return Availability(False, "DirectX 12 exists only on Windows")
        gpu = _opened(label)
        if gpu is not None:  # this process already opened the adapter: say which, for free
            return Availability(True, gpu.summary(), gpu.describe())
        return Availability(True, "wgpu is installed (adapter not opened yet: `rlx devices --probe full` names it "
                                  "and says whether it is a software adapter)")
    return BackendFactory(name=BACKEND_NAMES[label], device=label, create=create, priority=100,
                          description=_DESCRIPTIONS[label], requires=("wgpu",), probe=probe)


def _opened(label: str):
    """The profile's opened device when ``rlx_wgpu.gpu`` is already imported (no import here)."""
    gpu_module = sys.modules.get(f"{__package__}.gpu")
    return gpu_module.opened(label) if gpu_module is not None else None


@hookimpl
def rlx_backends():
    return [_factory(label) for label in _DESCRIPTIONS]


@hookimpl
def rlx_calibrate(backend: str, device, force: bool):
    """Measure a wgpu backend for the cost model (see ``rlx_wgpu.calibrate``); ``force``
    measures again instead of reading rlx-wgpu's own cache."""
    if backend not in BACKEND_NAMES.values():
        return None
    from .calibrate import calibrate
    return calibrate(str(device), refresh=force)

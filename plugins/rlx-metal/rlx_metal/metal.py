"""The ``metal`` backend: rlx-wgpu's code generation (through its public API,
``rlx_wgpu.api``) on an adapter of wgpu's Metal backend.

What this module adds to rlx-wgpu's behaviour:

* **the adapter** comes from the Metal backend only (``DeviceSpec(backend_type="Metal")``;
  ``RLX_METAL_POWER_PREFERENCE`` orders a Mac's two GPUs); ``RLX_METAL_ADAPTER_BACKEND=vulkan``
  asks for a Vulkan adapter instead, a test aid for machines without Metal;
* **unified memory**: ``unified_memory="auto"`` -- on an adapter that shares the host's
  memory (Apple silicon; lavapipe in the test mode) and has wgpu's
  ``mappable-primary-buffers``, each graph's arena is a host-mappable buffer (Metal's
  shared storage): inputs are written and outputs read in place, with no staging copies;
* **tiles** from the Metal calibration (``rlx_metal.calibrate``: its own tile candidates and
  its own cache file, ``metal-calib-*.json``);
* **MPS GEMM**: where pyobjc's MetalPerformanceShaders is installed (macOS) and the
  calibration measured MPS faster than the best WGSL tile, large f32 matmuls run through
  ``MPSMatrixMultiplication`` as host-kernel steps (``rlx_metal.mps``). Never run here.

Backend options (``CompileOptions(backend={...})``): ``matmul_tile`` (as rlx-wgpu) and
``gemm``: ``"auto"`` (default; the calibration decides), ``"wgsl"`` (never MPS) or
``"mps"`` (every eligible matmul through MPS; an error where MPS is unavailable).
"""
from __future__ import annotations

import threading

from rlx_core.errors import DeviceError, PolicyError
from rlx_core.ir import Graph
from rlx_core.runtime import Availability, CompileOptions, Device
from rlx_wgpu import api

from . import env
from .plugin import METAL_BACKEND, blocked, metal_blocker

__all__ = ["MetalBackend", "device_spec", "GEMM_ENGINES", "gemm_engine", "opened_availability"]

GEMM_ENGINES = ("auto", "wgsl", "mps")
_TEST_AID = ("TEST AID ({var}=vulkan): a Vulkan adapter stands in for Metal; nothing here runs on Metal")


def device_spec() -> "api.DeviceSpec":
    """The spec of the adapter the ``metal`` device opens now (reads the environment)."""
    from .calibrate import load_tuning
    return api.DeviceSpec("metal", env.adapter_backend(), power_preference=env.power_preference(),
                          unified_memory="auto", tuning=load_tuning)


def _availability(gpu) -> Availability:
    detail = dict(gpu.describe())
    detail["test_aid"] = gpu.info.get("backend_type") != "Metal"
    summary = gpu.summary()
    if detail["test_aid"]:
        summary += " -- " + _TEST_AID.format(var=env.ADAPTER_ENV)
    if gpu.unified_memory:
        summary += " (unified memory: mapped arenas)"
    return Availability(True, summary, detail)


def opened_availability() -> Availability | None:
    """The availability of the device the current settings name, if this process opened
    it already (opens nothing; None otherwise)."""
    try:
        gpu = api.opened_device(device_spec())
    except PolicyError:
        return None
    return _availability(gpu) if gpu is not None else None


def gemm_engine(option: str, gpu) -> str:
    """``"mps"`` or ``"wgsl"``: the engine of large f32 matmuls for a compile with backend
    option ``gemm=option`` on ``gpu`` (see the module docstring)."""
    from . import mps
    if option not in GEMM_ENGINES:
        raise DeviceError(f"metal backend option gemm={option!r}: expected one of {', '.join(GEMM_ENGINES)}")
    if option == "wgsl":
        return "wgsl"
    on_metal = gpu.info.get("backend_type") == "Metal"
    usable, reason = mps.available()
    if option == "mps":
        if not on_metal:
            raise DeviceError(f"metal backend option gemm='mps' needs the Metal adapter; this device is "
                              f"{gpu.summary()} ({env.ADAPTER_ENV} test aid)")
        if not usable:
            raise DeviceError(f"metal backend option gemm='mps': {reason}")
        return "mps"
    gpu.tuned_matmul_tile()  # loads the calibration (the Metal cache) into gpu.tuning
    return "mps" if on_metal and usable and (gpu.tuning or {}).get("gemm_engine") == "mps" else "wgsl"


class MetalBackend(api.DeviceBackend):
    option_names = ("matmul_tile", "gemm")

    def __init__(self):
        super().__init__(METAL_BACKEND, Device("metal"))
        self._lock = threading.Lock()

    def device_spec(self):
        return device_spec()

    def is_available(self) -> Availability:
        no = blocked(metal_blocker)
        if no is not None:
            return no
        try:
            gpu = self.gpu
        except Exception as e:  # no Metal adapter, wgpu's native library missing, ...
            return Availability(False, f"{type(e).__name__}: {e}")
        return _availability(gpu)

    def compile(self, graph: Graph, options: CompileOptions):
        blocker = metal_blocker()
        if blocker:
            raise DeviceError(f"device 'metal' is not available: {blocker}")
        return super().compile(graph, options)

    def overrides(self, graph: Graph, options: CompileOptions):
        gpu = self.gpu
        if gemm_engine(str(options.backend.get("gemm", "auto")), gpu) != "mps":
            return None
        from . import mps
        return mps.overrides(mps.engine())

"""Entry-point module (``rlx.backends``: ``cuda = "rlx_cuda.plugin"``): cheap to import.

It imports neither CuPy nor NVML. Without CuPy the factory's cheap probe reports
"missing Python package(s): cupy"; with it, the probe asks the driver (never raising).
GPU telemetry (NVML) is the core's own (``rlx_core.hw.nvml``), served with or without
this plugin, so nothing is registered for it here.
"""
from rlx_core.runtime import BackendFactory, hookimpl

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)


def _create():
    from .backend import CudaBackend
    return CudaBackend()


def _probe():
    from .probe import probe
    return probe()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="cuda", device="cuda", create=_create, priority=100,
                           description="NVIDIA GPU through CuPy: NVRTC kernels, cuBLAS, cuFFT, CUDA graphs",
                           requires=("cupy",), probe=_probe)]


@hookimpl
def rlx_calibrate(backend, device):
    if backend != "cuda":
        return None
    from .calibrate import calibrate
    return calibrate(getattr(device, "index", 0))

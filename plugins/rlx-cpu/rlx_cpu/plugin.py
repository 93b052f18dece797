"""Entry-point module: cheap to import, it only describes the backend."""
from rlx_core.runtime import Availability, BackendFactory, hookimpl

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)


def _create():
    from .backend import CpuBackend
    return CpuBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="cpu", device="cpu", create=_create, priority=100,
                           description="host CPU: numpy/BLAS kernels, numba-fused elementwise",
                           requires=("numpy", "numba"), probe=lambda: Availability(True, "host CPU"))]



@hookimpl
def rlx_calibrate(backend, device):
    """CPU figures for the cost model (imported on use: this module must stay cheap)."""
    if backend == "cpu":
        from .calibrate import calibrate
        return calibrate(device)

"""Entry-point module: cheap to import, it only describes the backend."""
from rlx_core.runtime import Availability, BackendFactory, hookimpl


def _create():
    from .backend import CpuBackend
    return CpuBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="cpu", device="cpu", create=_create, priority=100,
                           description="host CPU: numpy/BLAS kernels, numba-fused elementwise",
                           requires=("numpy", "numba"), probe=lambda: Availability(True, "host CPU"))]

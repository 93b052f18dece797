"""Entry-point module: cheap to import (no JAX), it only describes the backend."""
from rlx_core.runtime import BackendFactory, hookimpl

from .platform import cheap_availability

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)


def _create():
    from .backend import TpuBackend
    return TpuBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="tpu", device="tpu", create=_create, priority=100,
                           description="XLA through JAX: TPUs, or XLA:CPU / XLA:GPU with RLX_TPU_PLATFORM",
                           requires=("jax",), probe=cheap_availability)]


@hookimpl
def rlx_calibrate(backend, device):
    """Figures for the cost model, measured through the backend itself (``calibrate``)."""
    if backend != "tpu":
        return None
    from .calibrate import calibrate
    return calibrate()

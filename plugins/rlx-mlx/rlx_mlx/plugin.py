"""Entry-point module: cheap to import (no MLX), it only describes the backend."""
from rlx_core.runtime import BackendFactory, hookimpl

from .platform import cheap_availability

RLX_PLUGIN_API = 1  # the RLX plugin API this module was written for (rlx_core.runtime.PLUGIN_API_VERSION)


def _create():
    from .backend import MlxBackend
    return MlxBackend()


@hookimpl
def rlx_backends():
    return [BackendFactory(name="mlx", device="mlx", create=_create, priority=100,
                           description="MLX: Metal GPUs on Apple silicon, or MLX's Linux CUDA / CPU builds",
                           requires=("mlx",), probe=cheap_availability)]


@hookimpl
def rlx_calibrate(backend, device):
    """Figures for the cost model, measured through the backend itself (``calibrate``)."""
    if backend != "mlx":
        return None
    from .calibrate import calibrate
    return calibrate()

"""Reference kernels of the 'random' family: ``rlx_core.rng.draw`` shaped to the node."""
from __future__ import annotations

import math

from ..rng import draw
from .kernels import kernel


@kernel("rng_uniform", context=True)
def rng_uniform(ctx, *like, dims, dtype, key, seed, low, high):
    n = math.prod(dims)
    return draw(ctx.rng, "uniform", n, key=key, seed=seed, a=low, b=high, dtype=dtype.np).reshape(dims)


@kernel("rng_normal", context=True)
def rng_normal(ctx, *like, dims, dtype, key, seed, mean, scale):
    n = math.prod(dims)
    return draw(ctx.rng, "normal", n, key=key, seed=seed, a=mean, b=scale, dtype=dtype.np).reshape(dims)

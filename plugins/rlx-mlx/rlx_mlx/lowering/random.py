"""Lowerings of ``rng_uniform`` / ``rng_normal``, and Philox4x32-10 on MLX's device.

The three modes of ``RngOptions``:

* ``philox``: the program computes the u32 stream of ``rlx_core.rng.philox_u32`` bit for
  bit (u32 words; ``mulhi`` from u64 products), then maps it to numbers exactly as
  ``rlx_core.rng.draw`` does: uniforms equal the CPU backend's bit for bit, normals
  agree to a few ulp (MLX's ``log``/``cos``). The product of the uniform map goes
  through an integer operation with a run-time zero, so that no compiler merges it
  with the following add into a fused multiply-add (one rounding instead of numpy's
  two; MLX 0.29's CPU kernels did).
* ``ort``: the executor runs ``rlx_core.rng.draw`` itself on the host and passes the
  values in (onnxruntime's generator is a sequential rejection loop that has no place
  on a device); they are drawn once per seed and kept.
* ``zero``: zeros.

The run's seed is an argument of the compiled function (a u64 scalar), so ``set_rng``
with a new seed reuses it; control flow folds the seed with the iteration on the host
(``RngOptions.fold_in``), where the loops run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import mlx.core as mx
import numpy as np

from rlx_core.rng import RngOptions, combine_seed

from . import lowering, mx_dtype

__all__ = ["RngState", "philox4x32_10", "philox_u32", "host_draws"]

# Random123's Philox4x32 multipliers and Weyl key increments, as rlx_core.rng uses them.
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85


def _u32(v):
    return mx.array(v, mx.uint32)


def _u64(v):
    return mx.array(np.uint64(v))  # (mx.array(int) refuses values >= 2**63)


def _lo(x):
    return x.astype(mx.uint32)  # the low 32 bits: u64 -> u32 conversion truncates


def _hi(x):
    return (x >> _u64(32)).astype(mx.uint32)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """The Philox4x32-10 bijection on u32 counter words under key ``(k0, k1)`` (u32)."""
    m0, m1, w0, w1 = _u64(_M0), _u64(_M1), _u32(_W0), _u32(_W1)
    for _ in range(10):
        p0, p1 = c0.astype(mx.uint64) * m0, c2.astype(mx.uint64) * m1
        c0, c1, c2, c3 = _hi(p1) ^ c1 ^ k0, _lo(p1), _hi(p0) ^ c3 ^ k1, _lo(p0)
        k0, k1 = k0 + w0, k1 + w1
    return c0, c1, c2, c3


def philox_u32(stream, n: int):
    """Elements ``0 .. n`` of the u32 stream for the u64 key ``stream`` (``philox_u32``)."""
    if n == 0:  # a constant: no kernel runs on an empty array (see lowering.empty_array)
        return mx.array(np.zeros((0,), np.uint32))
    blocks = mx.arange(-(-n // 4), dtype=mx.uint32)  # counters below 2**32: the high word is 0
    zero = mx.zeros(blocks.shape, mx.uint32)
    words = philox4x32_10(blocks, zero, zero, zero, _lo(stream), _hi(stream))
    return mx.stack(words, axis=-1).reshape(-1)[:n]


@dataclass(frozen=True)
class RngState:
    """The random state while a (sub)graph is traced: the mode, the run's (folded) seed as
    a u64 MLX scalar, a run-time u32 zero (see the module docstring), the host-drawn
    values of ``ort`` mode by node id, and the host's ``RngOptions`` where the function
    runs on the host (control flow folds them per iteration)."""

    mode: str
    seed: Any = None
    zero: Any = None
    draws: Mapping[int, Any] = field(default_factory=dict)
    host: RngOptions | None = None
    gpu: bool = False


def _unit(u):
    """u32 -> f32 in [0, 1) with 24 random bits (``u32_to_unit``)."""
    return (u >> _u32(8)).astype(mx.float32) * mx.array(2.0 ** -24, mx.float32)


def _box_muller(u1, u2):
    u1 = mx.maximum(u1, mx.array(np.finfo(np.float32).tiny, mx.float32))
    return mx.sqrt(mx.array(-2.0, mx.float32) * mx.log(u1)) * mx.cos(mx.array(2 * np.pi, mx.float32) * u2)


def _affine(rng: RngState, offset: float, factor, x):
    """``f32(offset) + x * factor`` with numpy's two f32 roundings."""
    product = x * factor
    # Keep the product out of a fused multiply-add: MLX 0.29's CPU kernels fuse it (one
    # rounding instead of numpy's two, the last bit of some draws), GPU compilers may too.
    product = (product.view(mx.uint32) ^ rng.zero).view(mx.float32)
    return mx.array(offset, mx.float32) + product


def _philox(rng: RngState, dist, n, key, seed, a, b):
    """``draw``'s philox mode, in f32: ``seed`` (the node's fixed one) or the run's seed,
    combined with the node's key."""
    stream = (_u64(combine_seed(seed, key)) if seed is not None
              else rng.seed + _u64(combine_seed(0, key)))  # u64 arithmetic wraps as combine_seed does
    if dist == "uniform":
        span = np.float32(b) - np.float32(a)
        return _affine(rng, a, mx.array(span, mx.float32), _unit(philox_u32(stream, n)))
    u = _unit(philox_u32(stream, 2 * n)).reshape(n, 2)
    return _affine(rng, a, mx.array(b, mx.float32), _box_muller(u[:, 0], u[:, 1]))


def host_draws(rng: RngOptions, nodes) -> list:
    """The values of the rng ``nodes`` under ``rng`` (ort mode), drawn on the host."""
    from rlx_core.rng import draw
    from . import from_numpy
    out = []
    for node in nodes:
        attrs = node.attrs
        dist, a, b = (("uniform", attrs["low"], attrs["high"]) if node.kind == "rng_uniform"
                      else ("normal", attrs["mean"], attrs["scale"]))
        values = draw(rng, dist, math.prod(attrs["dims"]), key=attrs["key"], seed=attrs["seed"], a=a, b=b,
                      dtype=attrs["dtype"].np)
        out.append(from_numpy(values.reshape(attrs["dims"])))
    return out


def _draw(ctx, dist, dims, dtype, key, seed, a, b):
    rng: RngState = ctx.rng
    if rng.mode == "zero":
        return mx.zeros(tuple(dims), mx_dtype(dtype))
    if rng.mode == "ort":
        return rng.draws[ctx.node.id]
    n = math.prod(dims)
    if n == 0:
        return mx.zeros(tuple(dims), mx_dtype(dtype))
    return _philox(rng, dist, n, key, seed, a, b).astype(mx_dtype(dtype)).reshape(tuple(dims))


@lowering("rng_uniform", context=True)
def rng_uniform(ctx, *like, dims, dtype, key, seed, low, high):
    return _draw(ctx, "uniform", dims, dtype, key, seed, low, high)


@lowering("rng_normal", context=True)
def rng_normal(ctx, *like, dims, dtype, key, seed, mean, scale):
    return _draw(ctx, "normal", dims, dtype, key, seed, mean, scale)

"""Lowerings of ``rng_uniform`` / ``rng_normal``, and Philox4x32-10 on the device.

The three modes of ``RngOptions``:

* ``philox``: the program computes the u32 stream of ``rlx_core.rng.philox_u32`` bit for
  bit, in u32 words with ``mulhi`` taken from u64 products (x64 is on in the plugin's
  scope), then maps it to numbers exactly as ``rlx_core.rng.draw`` does. Uniforms
  therefore equal the CPU backend's bit for bit where the platform has f64 (see
  ``_f32_affine``; on TPUs the last bit is as exact as XLA:TPU's f32 multiply-add);
  normals agree to a few ulp (``log``/``cos``).
* ``ort``: a host callback (``jax.pure_callback``) runs ``rlx_core.rng.draw`` itself --
  onnxruntime's generator is a sequential rejection loop that has no place on a device.
* ``zero``: zeros.

The run's seed is an argument of the program (a u64 scalar), so ``set_rng`` with a new
seed reuses the compiled program; the mode is part of the program. Control flow folds
the seed with the iteration on the device (``RngState.fold_in``), as
``RngOptions.fold_in`` does on the host.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx_core.rng import RngOptions, combine_seed, draw

from . import lowering

__all__ = ["KINDS", "RngState", "philox4x32_10", "philox_u32", "fold_in"]

KINDS = ("rng_uniform", "rng_normal")

# Random123's Philox4x32 multipliers and Weyl key increments, as rlx_core.rng uses them.
_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_FOLD_TAG = 0x666F6C64  # rlx_core.rng.fold_in's third counter word ('fold')
_U32, _U64 = np.uint32, np.uint64


def _lo(x):
    return x.astype(_U32)  # the low 32 bits: u64 -> u32 conversion truncates


def _hi(x):
    return (x >> _U64(32)).astype(_U32)


def _join(lo, hi):
    return lo.astype(_U64) | (hi.astype(_U64) << _U64(32))


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """The Philox4x32-10 bijection on u32 counter words under key ``(k0, k1)`` (u32)."""
    for _ in range(10):
        p0, p1 = c0.astype(_U64) * _U64(_M0), c2.astype(_U64) * _U64(_M1)
        c0, c1, c2, c3 = _hi(p1) ^ c1 ^ k0, _lo(p1), _hi(p0) ^ c3 ^ k1, _lo(p0)
        k0, k1 = k0 + _U32(_W0), k1 + _U32(_W1)
    return c0, c1, c2, c3


def philox_u32(stream, n: int):
    """Elements ``0 .. n`` of the u32 stream for the u64 key ``stream`` (``philox_u32``)."""
    blocks = lax.iota(_U64, -(-n // 4))
    zero = jnp.zeros(blocks.shape, _U32)
    words = philox4x32_10(_lo(blocks), _hi(blocks), zero, zero, _lo(stream), _hi(stream))
    return jnp.stack(words, axis=-1).reshape(-1)[:n]


def fold_in(seed, data):
    """``rlx_core.rng.fold_in`` on the device: the first two words of the Philox block at
    counter ``(data, 'fold')`` under key ``seed`` (both u64)."""
    data = jnp.asarray(data).astype(_U64)
    b0, b1, _, _ = philox4x32_10(_lo(data), _hi(data), jnp.asarray(_FOLD_TAG, _U32), jnp.asarray(0, _U32),
                                 _lo(seed), _hi(seed))
    return _join(b0, b1)


@dataclass(frozen=True)
class RngState:
    """The random state while a (sub)graph is traced: the mode (fixed in the program)
    and the traced u64 seed, folded per control-flow iteration."""

    mode: str
    seed: Any

    def fold_in(self, data) -> "RngState":
        return RngState(self.mode, fold_in(self.seed, data))


def _unit(u):
    """u32 -> f32 in [0, 1) with 24 random bits (``u32_to_unit``)."""
    return (u >> _U32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def _box_muller(u1, u2):
    u1 = jnp.maximum(u1, np.finfo(np.float32).tiny)
    return jnp.sqrt(np.float32(-2.0) * jnp.log(u1)) * jnp.cos(np.float32(2 * np.pi) * u2)


def _f32_affine(offset: float, factor: float, x, exact: bool):
    """``f32(offset) + x * f32(factor)`` with numpy's two f32 roundings.

    XLA:CPU fuses a multiply feeding an add into one fused multiply-add (one rounding),
    and folds f64 -> f32 -> f64 conversion pairs too, which changes the last bit of a
    uniform draw. With ``exact`` (platforms with f64) the product is formed in f64,
    where it is exact, and rounded to f32 precision by integer operations on its bits,
    which no compiler merges with the float arithmetic around them; the f64 sum
    rounded to f32 the same way is then the f32 sum (53 >= 2*24 + 2 bits make that
    double rounding harmless). The sum is rounded by bits too: XLA:GPU drops an
    f64 -> f32 conversion whose result is widened back to f64 (a draw of dtype f64).
    """
    offset, factor = np.float32(offset), np.float32(factor)
    if not exact:
        return offset + x * factor
    product = _round_to_f32(x.astype(np.float64) * np.float64(factor))
    return _round_to_f32(np.float64(offset) + product).astype(np.float32)


def _round_to_f32(x):
    """f64 ``x`` rounded to the nearest f32 value (ties to even), kept in f64: the 29
    mantissa bits f32 lacks are rounded away in the integer bit pattern. Exact for
    results in f32's normal range, which draws of finite bounds stay in."""
    bits = lax.bitcast_convert_type(x, _U64)
    lsb = (bits >> _U64(29)) & _U64(1)
    bits = (bits + _U64((1 << 28) - 1) + lsb) & ~_U64((1 << 29) - 1)
    return lax.bitcast_convert_type(bits, np.float64)


def _philox(ctx, dist, n, key, seed, a, b):
    """``draw``'s philox mode, in f32: ``seed`` (the node's fixed one) or the run's seed,
    combined with the node's key."""
    stream = (jnp.asarray(combine_seed(seed, key), _U64) if seed is not None
              else ctx.rng.seed + _U64(combine_seed(0, key)))  # u64 arithmetic wraps as combine_seed does
    exact = ctx.platform != "tpu"  # TPUs have no f64
    if dist == "uniform":
        return _f32_affine(a, np.float32(b) - np.float32(a), _unit(philox_u32(stream, n)), exact)
    u = _unit(philox_u32(stream, 2 * n)).reshape(n, 2)
    return _f32_affine(a, b, _box_muller(u[:, 0], u[:, 1]), exact)


def _host_draw(rng: RngState, dist, dims, dtype, key, seed, a, b):
    """``draw`` itself, on the host, for the run's (folded) seed."""
    def fill(run_seed):
        options = RngOptions(int(run_seed), rng.mode)
        return draw(options, dist, math.prod(dims), key=key, seed=seed, a=a, b=b, dtype=dtype.np).reshape(dims)
    return jax.pure_callback(fill, jax.ShapeDtypeStruct(dims, dtype.np), rng.seed)


def _draw(ctx, dist, dims, dtype, key, seed, a, b):
    rng: RngState = ctx.rng
    if rng.mode == "zero":
        return jnp.zeros(dims, dtype.np)
    if rng.mode == "ort":
        return _host_draw(rng, dist, dims, dtype, key, seed, a, b)
    return _philox(ctx, dist, math.prod(dims), key, seed, a, b).astype(dtype.np).reshape(dims)


@lowering("rng_uniform", context=True)
def rng_uniform(ctx, *like, dims, dtype, key, seed, low, high):
    return _draw(ctx, "uniform", dims, dtype, key, seed, low, high)


@lowering("rng_normal", context=True)
def rng_normal(ctx, *like, dims, dtype, key, seed, mean, scale):
    return _draw(ctx, "normal", dims, dtype, key, seed, mean, scale)

"""Lowerings of the reduce family (definitions: ``rlx_core.ir.ops.reduce``).

Reductions pass ``dtype=x.dtype`` so that integers accumulate in their own width and
wrap as the op defines (jnp would widen them to i64 under x64).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import lowering


@lowering("reduce_sum")
def reduce_sum(x, *, axes, keepdims):
    return jnp.sum(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


@lowering("reduce_prod")
def reduce_prod(x, *, axes, keepdims):
    return jnp.prod(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


@lowering("reduce_mean")
def reduce_mean(x, *, axes, keepdims):
    count = math.prod(x.shape[a] for a in axes)
    return reduce_sum(x, axes=axes, keepdims=keepdims) / count  # 0 / 0 = nan for an empty mean


@lowering("reduce_max")
def reduce_max(x, *, axes, keepdims):
    return jnp.max(x, axis=axes, keepdims=keepdims)  # nan propagates, as in numpy


@lowering("reduce_min")
def reduce_min(x, *, axes, keepdims):
    return jnp.min(x, axis=axes, keepdims=keepdims)


@lowering("argmax")
def argmax(x, *, axis, keepdims):
    # jnp's arg-extrema pick the first index, and the first nan: numpy's rule.
    return jnp.argmax(x, axis=axis, keepdims=keepdims).astype(np.int64)


@lowering("argmin")
def argmin(x, *, axis, keepdims):
    return jnp.argmin(x, axis=axis, keepdims=keepdims).astype(np.int64)


def _minus_max(x, axis):
    """x - max(x) along axis (initial=-inf only lets an empty axis through)."""
    return x - jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)


@lowering("softmax")
def softmax(x, *, axis):
    e = jnp.exp(_minus_max(x, axis))
    return e / jnp.sum(e, axis=axis, keepdims=True)


@lowering("log_softmax")
def log_softmax(x, *, axis):
    shifted = _minus_max(x, axis)
    return shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))


@lowering("cumsum")
def cumsum(x, *, axis, exclusive, reverse):
    if exclusive:  # shift the input one step along the scan: the first output becomes 0
        n = x.shape[axis]
        zero = jnp.zeros_like(lax.slice_in_dim(x, 0, min(n, 1), axis=axis))
        kept = lax.slice_in_dim(x, 1, n, axis=axis) if reverse else lax.slice_in_dim(x, 0, max(n - 1, 0), axis=axis)
        x = jnp.concatenate([kept, zero] if reverse else [zero, kept], axis=axis)
    return lax.cumsum(x, axis=axis, reverse=reverse)


def topk_order(x, axis: int, largest: bool):
    """Indices ordering ``x`` along ``axis`` best first, ties in index order (the reference's
    ``topk_order``): a stable ascending sort puts nan last, i.e. treats it as the largest;
    descending order sorts the flipped axis and flips back, so ties stay in index order."""
    if not largest:
        return jnp.argsort(x, axis=axis, stable=True)
    n = x.shape[axis]
    return n - 1 - jnp.flip(jnp.argsort(jnp.flip(x, axis), axis=axis, stable=True), axis)


@lowering("topk")
def topk(x, *, k, axis, largest, sorted):
    idx = lax.slice_in_dim(topk_order(x, axis, largest), 0, k, axis=axis)
    if not sorted:
        idx = jnp.sort(idx, axis=axis)
    return jnp.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)

"""Lowerings of the reduce family (definitions: ``rlx_core.ir.ops.reduce``).

MLX widens narrow integers when it sums them (i8 -> i32); results are cast back to the
input's dtype, which wraps exactly as the op defines (sums modulo 2**bits).

Empty inputs never reach MLX's reductions: its CPU reduction over a zero-size input can
spin without end (seen with mlx 0.32.4 on an f32 [0, 3] sum), so the result -- the
reduction's identity, or nothing -- is built directly.
"""
from __future__ import annotations

import math

import mlx.core as mx


from . import lowering
from .elementwise import exp


def _same(x, r):
    return r if r.dtype == x.dtype else r.astype(x.dtype)


def _empty(x, axes, keepdims):
    """The dims of a reduction of ``x`` over ``axes``."""
    return tuple(1 if i in axes else n for i, n in enumerate(x.shape) if keepdims or i not in axes)


@lowering("reduce_sum")
def reduce_sum(x, *, axes, keepdims):
    if not axes:
        return x
    if x.size == 0:
        return mx.zeros(_empty(x, axes, keepdims), x.dtype)
    return _same(x, mx.sum(x, axis=tuple(axes), keepdims=keepdims))


@lowering("reduce_prod")
def reduce_prod(x, *, axes, keepdims):
    if not axes:
        return x
    if x.size == 0:
        return mx.ones(_empty(x, axes, keepdims), x.dtype)
    return _same(x, mx.prod(x, axis=tuple(axes), keepdims=keepdims))


@lowering("reduce_mean")
def reduce_mean(x, *, axes, keepdims):
    count = math.prod(x.shape[a] for a in axes)
    total = reduce_sum(x, axes=axes, keepdims=keepdims)
    if count == 0:  # 0 / 0
        return mx.full(total.shape, float("nan"), x.dtype)
    return total / mx.array(count, x.dtype)


def _extremum(fn, x, axes, keepdims):
    if not axes:
        return x
    if 0 in x.shape:  # numpy refuses an empty reduction; an empty result needs no values
        return mx.zeros(_empty(x, axes, keepdims), x.dtype)
    return fn(x, axis=tuple(axes), keepdims=keepdims)


@lowering("reduce_max")
def reduce_max(x, *, axes, keepdims):
    return _extremum(mx.max, x, axes, keepdims)  # nan propagates, as in numpy


@lowering("reduce_min")
def reduce_min(x, *, axes, keepdims):
    return _extremum(mx.min, x, axes, keepdims)


def _arg(fn, x, axis, keepdims):
    if 0 in x.shape:
        return mx.zeros(_empty(x, (axis,), keepdims), mx.int64)
    if x.dtype == mx.bool_:
        x = x.astype(mx.uint8)
    # MLX's arg-extrema pick the first index, and the first nan: numpy's rule.
    return fn(x, axis=axis, keepdims=keepdims).astype(mx.int64)


@lowering("argmax")
def argmax(x, *, axis, keepdims):
    return _arg(mx.argmax, x, axis, keepdims)


@lowering("argmin")
def argmin(x, *, axis, keepdims):
    return _arg(mx.argmin, x, axis, keepdims)


def _minus_max(x, axis):
    return x - mx.max(x, axis=axis, keepdims=True)


@lowering("softmax")
def softmax(x, *, axis):
    if x.size == 0:
        return x
    e = exp(_minus_max(x, axis))
    return e / mx.sum(e, axis=axis, keepdims=True)


@lowering("log_softmax")
def log_softmax(x, *, axis):
    if x.size == 0:
        return x
    shifted = _minus_max(x, axis)
    return shifted - mx.log(mx.sum(exp(shifted), axis=axis, keepdims=True))


@lowering("cumsum")
def cumsum(x, *, axis, exclusive, reverse):
    if x.size == 0:
        return x
    return _same(x, mx.cumsum(x, axis=axis, reverse=reverse, inclusive=not exclusive))


def topk_order(x, axis: int, largest: bool):
    """Indices ordering ``x`` along ``axis`` best first, ties in index order (the reference's
    ``topk_order``): MLX's ascending sort is stable and puts nan last (the largest);
    descending order sorts the reversed axis and reverses back, so ties stay in index order."""
    if x.dtype == mx.bool_:
        x = x.astype(mx.uint8)
    if not largest:
        return mx.argsort(x, axis=axis)
    n = x.shape[axis]
    flip = tuple(slice(None, None, -1) if i == axis else slice(None) for i in range(x.ndim))
    return (n - 1) - mx.argsort(x[flip], axis=axis)[flip].astype(mx.int64)


@lowering("topk")
def topk(x, *, k, axis, largest, sorted):
    dims = tuple(k if i == axis else n for i, n in enumerate(x.shape))
    if 0 in dims:
        return mx.zeros(dims, x.dtype), mx.zeros(dims, mx.int64)
    keep = tuple(slice(0, k) if i == axis else slice(None) for i in range(x.ndim))
    idx = topk_order(x, axis, largest).astype(mx.int32)[keep]
    if not sorted:
        idx = mx.sort(idx, axis=axis)
    return mx.take_along_axis(x, idx, axis=axis), idx.astype(mx.int64)

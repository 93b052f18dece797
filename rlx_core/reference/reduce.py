"""Reference kernels of the 'reduce' family. Definitions are in ``rlx_core.ir.ops.reduce``."""
from __future__ import annotations

import numpy as np

from .kernels import kernel


@kernel("reduce_sum")
def reduce_sum(x, *, axes, keepdims):
    # dtype=x.dtype keeps integers in their own width, so they wrap as the op defines.
    return np.sum(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


@kernel("reduce_prod")
def reduce_prod(x, *, axes, keepdims):
    return np.prod(x, axis=axes, dtype=x.dtype, keepdims=keepdims)


@kernel("reduce_mean")
def reduce_mean(x, *, axes, keepdims):
    count = int(np.prod([x.shape[a] for a in axes]))
    return reduce_sum(x, axes=axes, keepdims=keepdims) / count  # 0 / 0 = nan for an empty mean


@kernel("reduce_max")
def reduce_max(x, *, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims)


@kernel("reduce_min")
def reduce_min(x, *, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims)


@kernel("argmax")
def argmax(x, *, axis, keepdims):
    # numpy: first index of the maximum, and any nan is the maximum.
    return np.argmax(x, axis=axis, keepdims=keepdims).astype(np.int64)


@kernel("argmin")
def argmin(x, *, axis, keepdims):
    return np.argmin(x, axis=axis, keepdims=keepdims).astype(np.int64)


def _minus_max(x, axis):
    """x - max(x) along axis (initial=-inf only lets an empty axis through)."""
    return x - np.max(x, axis=axis, keepdims=True, initial=-np.inf)


@kernel("softmax")
def softmax(x, *, axis):
    e = np.exp(_minus_max(x, axis))
    return e / np.sum(e, axis=axis, keepdims=True)


@kernel("log_softmax")
def log_softmax(x, *, axis):
    shifted = _minus_max(x, axis)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@kernel("cumsum")
def cumsum(x, *, axis, exclusive, reverse):
    t = np.moveaxis(x, axis, -1)  # scan the last axis
    if reverse:
        t = t[..., ::-1]
    if exclusive:  # shift the input by one: the same additions in the same order as inclusive
        t = np.concatenate([np.zeros_like(t[..., :1]), t[..., :-1]], axis=-1)
    out = np.cumsum(t, axis=-1, dtype=x.dtype)
    if reverse:
        out = out[..., ::-1]
    return np.moveaxis(out, -1, axis)


def topk_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices that order ``x`` along ``axis`` best first; equal values keep index order.

    numpy's stable ascending sort already puts nan last (= largest) and keeps ties in
    index order. For descending order sort the flipped axis ascending and flip back: ties
    then come out in increasing original index as well.
    """
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


@kernel("topk")
def topk(x, *, k, axis, largest, sorted):
    idx = np.take(topk_order(x, axis, largest), range(k), axis=axis)
    if not sorted:
        idx = np.sort(idx, axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)

"""Lowerings of the quant family (definitions: ``rlx_core.ir.ops.quant``)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from . import lowering, mx_dtype


def _along(axis, ndim, v):
    """A rank-0 scale/zero point as is; a 1-D one shaped to broadcast along ``axis``."""
    return v.reshape([-1 if i == axis else 1 for i in range(ndim)]) if v.ndim == 1 else v


@lowering("quantize")
def quantize(x, scale, zero_point=None, *, axis, to):
    zero = 0 if zero_point is None else _along(axis, x.ndim, zero_point).astype(x.dtype)
    q = mx.round(x / _along(axis, x.ndim, scale)) + zero  # round is half to even, as rint
    info = np.iinfo(to.np)
    return mx.clip(q, info.min, info.max).astype(mx_dtype(to))


@lowering("dequantize")
def dequantize(q, scale, zero_point=None, *, axis):
    diff = q.astype(mx.int64)  # exact, also for i32 minus an i32 zero point
    if zero_point is not None:
        diff = diff - _along(axis, q.ndim, zero_point).astype(mx.int64)
    return diff.astype(scale.dtype) * _along(axis, q.ndim, scale)

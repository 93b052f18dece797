"""Lowerings of the quant family (definitions: ``rlx_core.ir.ops.quant``)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from rlx_core.reference.quant import along_axis

from . import lowering, mx_dtype


@lowering("quantize")
def quantize(x, scale, zero_point=None, *, axis, to):
    zero = 0 if zero_point is None else along_axis(axis, x.ndim, zero_point).astype(x.dtype)
    q = mx.round(x / along_axis(axis, x.ndim, scale)) + zero  # round is half to even, as rint
    info = np.iinfo(to.np)
    return mx.clip(q, info.min, info.max).astype(mx_dtype(to))


@lowering("dequantize")
def dequantize(q, scale, zero_point=None, *, axis):
    diff = q.astype(mx.int64)  # exact, also for i32 minus an i32 zero point
    if zero_point is not None:
        diff = diff - along_axis(axis, q.ndim, zero_point).astype(mx.int64)
    return diff.astype(scale.dtype) * along_axis(axis, q.ndim, scale)

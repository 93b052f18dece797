"""Reference kernels of the 'quant' family. Definitions are in ``rlx_core.ir.ops.quant``."""
from __future__ import annotations

import numpy as np

from .kernels import kernel


def along_axis(axis, ndim, v):
    """A rank-0 scale/zero point as is; a 1-D one shaped to broadcast along ``axis`` of a
    rank-``ndim`` tensor. Only ``.ndim`` and ``.reshape`` are used, so the backends apply
    it to their own arrays (MLX, JAX) as well."""
    return v.reshape([-1 if i == axis else 1 for i in range(ndim)]) if v.ndim == 1 else v


@kernel("quantize")
def quantize(x, scale, zero_point=None, *, axis, to):
    zero = 0 if zero_point is None else along_axis(axis, x.ndim, zero_point).astype(x.dtype)
    q = np.rint(x / along_axis(axis, x.ndim, scale)) + zero  # rint rounds half to even
    info = np.iinfo(to.np)
    return np.clip(q, info.min, info.max).astype(to.np)


@kernel("dequantize")
def dequantize(q, scale, zero_point=None, *, axis):
    diff = q.astype(np.int64)
    if zero_point is not None:
        diff = diff - along_axis(axis, q.ndim, zero_point).astype(np.int64)
    return diff.astype(scale.dtype) * along_axis(axis, q.ndim, scale)

"""Lowerings of the conv family (definitions: ``rlx_core.ir.ops.conv``), on XLA's
convolution and reduce-window operations."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx_core.ir.ops.conv import pool_geometry

from . import lowering
from .linalg import contraction

_LAYOUTS = {1: ("NCH", "OIH", "NCH"), 2: ("NCHW", "OIHW", "NCHW")}


def _add_bias(y, bias):
    return y if bias is None else y + bias.astype(y.dtype).reshape((-1,) + (1,) * (y.ndim - 2))


@lowering("conv", low_float=True)
def conv(x, w, bias=None, *, strides, pads, dilations, groups):
    n = x.ndim - 2
    y = lax.conv_general_dilated(x, w, window_strides=strides, padding=list(zip(pads[:n], pads[n:])),
                                 rhs_dilation=dilations, dimension_numbers=_LAYOUTS[n],
                                 feature_group_count=groups, **contraction(x.dtype))
    return _add_bias(y, bias)


@lowering("conv_transpose2d", low_float=True)
def conv_transpose2d(x, w, bias=None, *, strides, pads, dilations, output_padding, groups):
    """The adjoint of ``conv``, as the forward convolution of the stride-dilated input
    with the spatially flipped kernel whose input and output channels are swapped
    (per group). Padding ``d*(k-1) - pad`` on each side (plus output_padding at the end)
    gives the full output cropped by ``pads``; where that is negative, the result is
    cropped instead."""
    ci, co_per_group, *kernel = w.shape
    forward = (w.reshape((groups, ci // groups, co_per_group) + tuple(kernel)).swapaxes(1, 2)
               .reshape((groups * co_per_group, ci // groups) + tuple(kernel))[..., ::-1, ::-1])
    low = [d * (k - 1) - p for k, d, p in zip(kernel, dilations, pads[:2])]
    high = [d * (k - 1) - p + extra for k, d, p, extra in zip(kernel, dilations, pads[2:], output_padding)]
    y = lax.conv_general_dilated(x, forward, window_strides=(1, 1),
                                 padding=[(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)],
                                 lhs_dilation=strides, rhs_dilation=dilations, dimension_numbers=_LAYOUTS[2],
                                 feature_group_count=groups, **contraction(x.dtype))
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0)) for lo, hi, size in zip(low, high, y.shape[2:]))
    return _add_bias(y[(slice(None), slice(None)) + crop], bias)


def _window_reduce(x, init, op, kernel, strides, dilations, begin, end):
    """``op``-reduce of every pooling window over the spatial axes of ``x`` [N, C, H, W]
    padded by ``begin``/``end`` with ``init``."""
    return lax.reduce_window(x, np.asarray(init, x.dtype), op, (1, 1) + tuple(kernel), (1, 1) + tuple(strides),
                             ((0, 0), (0, 0)) + tuple(zip(begin, end)), window_dilation=(1, 1) + tuple(dilations))


@lowering("pool2d")
def pool2d(x, *, mode, kernel, strides, pads, dilations, count_include_pad, ceil_mode):
    in_dims = x.shape[2:]
    out_dims, end = pool_geometry(in_dims, kernel, strides, dilations, pads, ceil_mode)
    keep = (slice(None), slice(None)) + tuple(slice(0, o) for o in out_dims)
    if mode == "max":  # -inf padding never wins
        return _window_reduce(x, -np.inf, lax.max, kernel, strides, dilations, pads[:2], end)[keep]
    total = _window_reduce(x, 0, lax.add, kernel, strides, dilations, pads[:2], end)[keep]
    # The divisor: how many counted positions each window covers (a constant XLA folds).
    first, last = ((0, 0), [size + pb + pe for size, pb, pe in zip(in_dims, pads[:2], pads[2:])]) \
        if count_include_pad else (pads[:2], [size + pb for size, pb in zip(in_dims, pads[:2])])
    counted = np.zeros((1, 1) + tuple(size + pb + e for size, pb, e in zip(in_dims, pads[:2], end)), x.dtype)
    counted[(0, 0) + tuple(slice(f, l) for f, l in zip(first, last))] = 1
    count = _window_reduce(jnp.asarray(counted), 0, lax.add, kernel, strides, dilations, (0, 0), (0, 0))[keep]
    return total / count

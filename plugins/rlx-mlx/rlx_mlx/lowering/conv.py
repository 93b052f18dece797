"""Lowerings of the conv family (definitions: ``rlx_core.ir.ops.conv``).

Convolutions run on ``mx.conv_general`` in MLX's channels-last layout (``x`` is moved
from ``[N, C, *spatial]`` to ``[N, *spatial, C]`` and the kernel from ``[O, I, *k]`` to
``[O, *k, I]``, and the result back), on f32 values for 16-bit inputs. The transposed
convolution is the forward convolution of the stride-dilated input
(``input_dilation``) with the spatially flipped kernel whose input and output channels
are swapped per group. Pooling reduces over the kernel taps: one strided slice of the
padded input per tap.
"""
from __future__ import annotations

import mlx.core as mx

from rlx_core.ir import DType
import numpy as np

from rlx_core.ir.ops.conv import pool_geometry

from . import lowering


def _channels_last(x):
    return mx.moveaxis(x, 1, -1)


def _channels_first(y):
    return mx.moveaxis(y, -1, 1)


def _add_bias(y, bias):
    return y if bias is None else y + bias.reshape((-1,) + (1,) * (y.ndim - 2))


def _conv(x, w, strides, low, high, dilations, groups, input_dilation=None):
    """``mx.conv_general`` on RLX layouts: x [N, C, *in], w [O, C/groups, *k] -> [N, O, *out]."""
    n = x.ndim - 2
    y = mx.conv_general(_channels_last(x), _channels_last(w), stride=list(strides), padding=(list(low), list(high)),
                        kernel_dilation=list(dilations), input_dilation=list(input_dilation or (1,) * n),
                        groups=groups)
    return _channels_first(y)


@lowering("conv", exclude={DType.F64})  # MLX convolves f64 in f32
def conv(x, w, bias=None, *, strides, pads, dilations, groups):
    n = x.ndim - 2
    return _add_bias(_conv(x, w, strides, pads[:n], pads[n:], dilations, groups), bias)


@lowering("conv_transpose2d", exclude={DType.F64})  # MLX convolves f64 in f32
def conv_transpose2d(x, w, bias=None, *, strides, pads, dilations, output_padding, groups):
    """Padding ``d*(k-1) - pad`` on each side (plus output_padding at the end) gives the full
    output cropped by ``pads``; where that is negative, the result is cropped instead."""
    ci, co_per_group, kh, kw = w.shape
    forward = (w.reshape((groups, ci // groups, co_per_group, kh, kw)).swapaxes(1, 2)
               .reshape((groups * co_per_group, ci // groups, kh, kw))[:, :, ::-1, ::-1])
    low = [d * (k - 1) - p for k, d, p in zip((kh, kw), dilations, pads[:2])]
    high = [d * (k - 1) - p + extra for k, d, p, extra in zip((kh, kw), dilations, pads[2:], output_padding)]
    y = _conv(x, forward, (1, 1), [max(v, 0) for v in low], [max(v, 0) for v in high], dilations, groups,
              input_dilation=strides)
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0)) for lo, hi, size in zip(low, high, y.shape[2:]))
    return _add_bias(y[(slice(None), slice(None)) + crop], bias)


def _taps(padded, kernel, strides, dilations, out_dims):
    """One strided slice of ``padded`` [N, C, H, W] per kernel tap: what that tap reads at
    every output position."""
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                       for t, d, s, o in zip(tap, dilations, strides, out_dims))
        yield padded[(slice(None), slice(None)) + window]


@lowering("pool2d")
def pool2d(x, *, mode, kernel, strides, pads, dilations, count_include_pad, ceil_mode):
    in_dims = tuple(x.shape[2:])
    out_dims, end = pool_geometry(in_dims, kernel, strides, dilations, pads, ceil_mode)
    width = [(0, 0), (0, 0)] + [(b, e) for b, e in zip(pads[:2], end)]
    if 0 in x.shape:
        return mx.zeros(tuple(x.shape[:2]) + tuple(out_dims), x.dtype)
    if mode == "max":  # -inf padding never wins; nan propagates through maximum
        padded = mx.pad(x, width, constant_values=mx.array(-np.inf, x.dtype))
        result = None
        for part in _taps(padded, kernel, strides, dilations, out_dims):
            result = part if result is None else mx.maximum(result, part)
        return result
    padded = mx.pad(x, width)
    total = None
    for part in _taps(padded, kernel, strides, dilations, out_dims):
        total = part if total is None else total + part
    # The divisor: how many counted positions each window covers (computed on the host).
    first, last = ((0, 0), [size + pb + pe for size, pb, pe in zip(in_dims, pads[:2], pads[2:])]) \
        if count_include_pad else (pads[:2], [size + pb for size, pb in zip(in_dims, pads[:2])])
    counted = np.zeros(tuple(size + pb + e for size, pb, e in zip(in_dims, pads[:2], end)), np.float64)
    counted[tuple(slice(f, l) for f, l in zip(first, last))] = 1
    count = sum(counted[tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                              for t, d, s, o in zip(tap, dilations, strides, out_dims))]
                for tap in np.ndindex(*kernel))
    return total / mx.array(count, x.dtype)

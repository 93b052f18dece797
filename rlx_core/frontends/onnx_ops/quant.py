"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the
quantized integer products ConvInteger, QLinearMatMul and QLinearConv.

The integer products are computed exactly (i32, or f64 for convolutions, whose sums of
8-bit products stay far below 2**53) and requantized as ONNX's reference does: the
accumulator times ``a_scale * b_scale / y_scale`` (an f32 product) in f64, plus the
zero point, rounded half to even and clamped.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ..onnx import onnx_dtype, onnx_op
from .conv import Window, convolve


@onnx_op("QuantizeLinear")
def quantize_linear(ctx):
    """The IR's ``quantize`` for per-tensor / per-axis i8 and u8 (ONNX's default); the
    formula spelled out for blocked scales and other integer types."""
    g = ctx.g
    x, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    precision = ctx.attr("precision")
    work = onnx_dtype(precision) if precision else scale.dtype
    to = zero_point.dtype if zero_point is not None else onnx_dtype(ctx.attr("output_dtype", 2))  # default u8
    if not to.is_int:
        raise ctx.unsupported(f"quantization to {to}")
    x, scale = g.cast(x, work), g.cast(scale, work)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    if not block and to in (DType.I8, DType.U8):
        return g.quantize(x, scale, zero_point, axis=axis, to=to)
    q = g.round(x / _spread_like(ctx, scale, x, axis, block))
    if zero_point is not None:
        q = q + g.cast(_spread_like(ctx, zero_point, x, axis, block), work)
    return saturate(g, q, to)


@onnx_op("DequantizeLinear")
def dequantize_linear(ctx):
    """The IR's ``dequantize`` for per-tensor / per-axis i8, u8 and i32; the formula
    ``(q - zero_point) * scale`` (exact in i64) for blocked scales and other types."""
    g = ctx.g
    q, scale, zero_point = ctx.input(0), ctx.input(1), ctx.input(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    if not block and q.dtype in (DType.I8, DType.U8, DType.I32):
        y = g.dequantize(q, scale, zero_point, axis=axis)
    else:
        diff = g.cast(q, DType.I64)
        if zero_point is not None:
            diff = diff - g.cast(_spread_like(ctx, zero_point, q, axis, block), DType.I64)
        y = g.cast(diff, scale.dtype) * _spread_like(ctx, scale, q, axis, block)
    out = ctx.attr("output_dtype")
    return g.cast(y, onnx_dtype(out)) if out else y


def _spread_like(ctx, param, x, axis: int, block: int):
    """A scale or zero point broadcastable against ``x``: rank 0 as is, 1-D along ``axis``,
    blocked (``block`` > 0: entry i covers ``x``'s indices ``i*block ..`` along ``axis``)
    repeated to ``x``'s dims."""
    g = ctx.g
    axis = axis + x.rank if axis < 0 else axis
    if param.rank == 0:
        return param
    if not block:
        return g.reshape(param, [param.dims[0] if i == axis else 1 for i in range(x.rank)])
    owner = np.arange(x.dims[axis], dtype=np.int64) // block
    if param.rank != x.rank or owner[-1] >= param.dims[axis]:
        raise ctx.error(f"blocked scale {list(param.dims)} does not cover x {list(x.dims)} in blocks of "
                        f"{block} along axis {axis}")
    return g.gather(param, owner, axis=axis)


@onnx_op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx):
    """u8 with ``scale = (max(x, 0) - min(x, 0)) / 255`` (1/255 when both are 0) and the
    zero point that maps the range's low end to 0, rounded half to even."""
    g = ctx.g
    x = ctx.input(0)
    high, low = g.max(g.reduce_max(x), 0.0), g.min(g.reduce_min(x), 0.0)
    spread = high - low
    scale = g.where(g.eq(spread, 0.0), 1.0, spread) / 255.0
    zero_point = g.cast(g.round(g.min(g.max(-low / scale, 0.0), 255.0)), DType.U8)
    return [g.quantize(x, scale, zero_point), scale, zero_point]


# --- integer products -------------------------------------------------------------------------
def _centered(g, q, zero_point, dtype, channel_axis_dims=None):
    """``q - zero_point`` in ``dtype``; a 1-D zero point is reshaped to ``channel_axis_dims``."""
    q = g.cast(q, dtype)
    if zero_point is None:
        return q
    zp = g.cast(zero_point, dtype)
    if zp.rank == 1 and channel_axis_dims is not None:
        zp = g.reshape(zp, channel_axis_dims)
    return q - zp


def _integer_conv(ctx, x, x_zp, w, w_zp, dtype):
    """The convolution of the zero-centred integers, exact in f64, as ``dtype``."""
    g = ctx.g
    xc = _centered(g, x, x_zp, DType.F64)
    wc = _centered(g, w, w_zp, DType.F64, [w.dims[0]] + [1] * (w.rank - 1))
    win = Window.of_node(ctx, x.dims[2:], ctx.attr("kernel_shape", w.dims[2:]))
    y = convolve(ctx, xc, wc, None, win, ctx.attr("group", 1))
    return g.cast(y, dtype)


def _requantize(g, acc, multiplier, zero_point, to: DType):
    """``saturate(round(acc * multiplier + zero_point))`` in f64."""
    y = g.cast(acc, DType.F64) * g.cast(multiplier, DType.F64)
    if zero_point is not None:
        y = y + g.cast(zero_point, DType.F64)
    return saturate(g, y, to)


def saturate(g, y, to: DType):
    """Float ``y`` rounded half to even and clamped into the integer dtype ``to``."""
    info = np.iinfo(to.np)
    return g.cast(g.min(g.max(g.round(y), float(info.min)), float(info.max)), to)


@onnx_op("ConvInteger")
def conv_integer(ctx):
    return _integer_conv(ctx, ctx.input(0), ctx.input(2), ctx.input(1), ctx.input(3), DType.I32)


@onnx_op("QLinearConv")
def qlinear_conv(ctx):
    g = ctx.g
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = (ctx.input(i) for i in range(9))
    acc = _integer_conv(ctx, x, x_zp, w, w_zp, DType.F64)
    if bias is not None:
        acc = acc + g.reshape(g.cast(bias, DType.F64), [bias.dims[0], 1] + [1] * (x.rank - 3))
    if w_scale.rank == 1:
        w_scale = g.reshape(w_scale, [w_scale.dims[0]] + [1] * (x.rank - 2))
    to = y_zp.dtype if y_zp is not None else x.dtype
    return _requantize(g, acc, x_scale * w_scale / y_scale, y_zp, to)


@onnx_op("QLinearMatMul")
def qlinear_matmul(ctx):
    g = ctx.g
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (ctx.input(i) for i in range(8))
    acc = g.matmul(_centered(g, a, a_zp, DType.I32), _centered(g, b, b_zp, DType.I32))
    to = y_zp.dtype if y_zp is not None else a.dtype
    return _requantize(g, acc, a_scale * b_scale / y_scale, y_zp, to)

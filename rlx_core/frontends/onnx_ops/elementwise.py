"""Elementwise ONNX ops: math functions, arithmetic, comparisons, activations, casts.

Functions the IR has no kind for are composed from kinds it has, with the textbook
identities (``asinh(x) = log(x + sqrt(x**2 + 1))`` ...); the ONNX node tests check them
at ONNX's tolerances.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ..onnx import computed_in_f32, onnx_dtype, onnx_op

_UNARY = {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Sin": "sin", "Cos": "cos", "Tan": "tan", "Atan": "atan", "Tanh": "tanh", "Sigmoid": "sigmoid",
          "Relu": "relu", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
          "Not": "logical_not", "Softplus": "softplus"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor", "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
           "GreaterOrEqual": "ge"}


@onnx_op(*_UNARY)
def unary(ctx):
    x = ctx.input(0)
    if not x.dtype.is_signed and ctx.op_type in ("Abs", "Relu"):
        return x  # unsigned integers: |x| = max(x, 0) = x
    if not x.dtype.is_signed and ctx.op_type == "Sign":
        return ctx.g.cast(x > 0, x.dtype)
    return getattr(ctx.g, _UNARY[ctx.op_type])(x)


@onnx_op(*_BINARY)
def binary(ctx):
    return getattr(ctx.g, _BINARY[ctx.op_type])(ctx.input(0), ctx.input(1))


# --- functions composed from other kinds -------------------------------------------------
@onnx_op("Sinh")
@computed_in_f32
def sinh(ctx):
    x = ctx.input(0)
    return (ctx.g.exp(x) - ctx.g.exp(-x)) * 0.5


@onnx_op("Cosh")
@computed_in_f32
def cosh(ctx):
    x = ctx.input(0)
    return (ctx.g.exp(x) + ctx.g.exp(-x)) * 0.5


@onnx_op("Asinh")
@computed_in_f32
def asinh(ctx):
    x = ctx.input(0)
    # odd symmetry keeps large negative x accurate: asinh(x) = sign(x) log(|x| + sqrt(x^2 + 1))
    a = ctx.g.abs(x)
    return ctx.g.sign(x) * ctx.g.log(a + ctx.g.sqrt(a * a + 1.0))


@onnx_op("Acosh")
@computed_in_f32
def acosh(ctx):
    x = ctx.input(0)
    return ctx.g.log(x + ctx.g.sqrt(x * x - 1.0))


@onnx_op("Atanh")
@computed_in_f32
def atanh(ctx):
    x = ctx.input(0)
    return ctx.g.log((1.0 + x) / (1.0 - x)) * 0.5


@onnx_op("Asin")
@computed_in_f32
def asin(ctx):
    x = ctx.input(0)
    return ctx.g.atan2(x, ctx.g.sqrt((1.0 - x) * (1.0 + x)))  # nan outside [-1, 1], as ONNX


@onnx_op("Acos")
@computed_in_f32
def acos(ctx):
    x = ctx.input(0)
    return ctx.g.atan2(ctx.g.sqrt((1.0 - x) * (1.0 + x)), x)


# --- arithmetic with ONNX typing rules ----------------------------------------------------
@onnx_op("Pow")
def pow_(ctx):
    """The result has the base's type. Integer bases are computed in f64 and converted
    back (exact while |result| < 2**53; integer overflow is undefined in ONNX too)."""
    base, exponent = ctx.input(0), ctx.input(1)
    if base.dtype.is_float:
        return ctx.g.pow(base, ctx.g.cast(exponent, base.dtype))
    wide = ctx.g.pow(ctx.g.cast(base, DType.F64), ctx.g.cast(exponent, DType.F64))
    return ctx.g.cast(wide, base.dtype)


@onnx_op("Mod")
def mod(ctx):
    return ctx.g.mod(ctx.input(0), ctx.input(1), fmod=bool(ctx.attr("fmod", 0)))


@onnx_op("BitShift")
def bit_shift(ctx):
    """``x << y`` wraps like the same shift in C (two's complement); ``x >> y`` is
    arithmetic for signed types (the floor of ``x / 2**y``). Shift amounts outside
    ``[0, bits)`` give 0 (or -1 for a negative x shifted right), ONNX's rule."""
    x, y = ctx.input(0), ctx.input(1)
    if not x.dtype.is_int:
        raise ctx.unsupported(f"BitShift of {x.dtype} (integers only)")
    bits = 8 * x.dtype.itemsize
    valid = ctx.g.logical_and(y >= 0, y < bits)
    amount = ctx.g.cast(ctx.g.min(ctx.g.max(y, 0), bits - 1), DType.I64)
    if ctx.attr("direction") == "LEFT":
        shifted = x * _powers_of_two(ctx, x.dtype, amount)
        return ctx.g.where(valid, shifted, ctx.g.as_value(0, x.dtype))
    # floor(x / 2**y) as two floor divisions whose divisors both fit the dtype
    half = ctx.g.div(amount, 2)
    shifted = _floor_div(ctx, _floor_div(ctx, x, _powers_of_two(ctx, x.dtype, half)),
                         _powers_of_two(ctx, x.dtype, amount - half))
    zero = ctx.g.as_value(0, x.dtype)
    overflow = ctx.g.where(x < 0, ctx.g.as_value(-1, x.dtype), zero) if x.dtype.is_signed else zero
    return ctx.g.where(valid, shifted, overflow)


def _powers_of_two(ctx, dtype: DType, exponent):
    """``2**exponent`` in ``dtype`` (wrapped as C does: 2**7 in i8 is -128), by table lookup."""
    bits = 8 * dtype.itemsize
    table = np.array([1 << k for k in range(bits)], dtype=np.uint64).view(np.int64).astype(dtype.np)
    return ctx.g.gather(ctx.g.constant(table), exponent)


def _floor_div(ctx, x, d):
    """``floor(x / d)`` for integers (the IR's div truncates toward zero)."""
    return ctx.g.div(x - ctx.g.mod(x, d), d)


@onnx_op("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    fn = {"Max": ctx.g.max, "Min": ctx.g.min, "Sum": ctx.g.add, "Mean": ctx.g.add}[ctx.op_type]
    xs = ctx.inputs()
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc / float(len(xs)) if ctx.op_type == "Mean" else acc


@onnx_op("Identity")
def identity(ctx):
    return ctx.input(0)


@onnx_op("Where")
def where(ctx):
    return ctx.g.where(ctx.input(0), ctx.input(1), ctx.input(2))


@onnx_op("Cast")
def cast(ctx):
    return ctx.g.cast(ctx.input(0), onnx_dtype(ctx.attr("to")))


@onnx_op("CastLike")
def cast_like(ctx):
    """Only the target's dtype matters, so a constant input stays an import-time constant."""
    dtype = ctx.input(1).dtype
    if ctx.is_const(0):
        return np.asarray(ctx.const(0)).astype(dtype.np)
    return ctx.g.cast(ctx.input(0), dtype)


# --- activations ----------------------------------------------------------------------------
@onnx_op("Gelu")
def gelu(ctx):
    approx = ctx.attr("approximate", "none")
    return ctx.g.gelu_tanh(ctx.input(0)) if approx == "tanh" else ctx.g.gelu(ctx.input(0))


@onnx_op("LeakyRelu")
@computed_in_f32
def leaky_relu(ctx):
    x = ctx.input(0)
    return ctx.g.where(x < 0, x * float(ctx.attr("alpha", 0.01)), x)


@onnx_op("PRelu")
@computed_in_f32
def prelu(ctx):
    x, slope = ctx.input(0), ctx.input(1)
    return ctx.g.where(x < 0, x * slope, x)


@onnx_op("Elu")
@computed_in_f32
def elu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ctx.g.where(x < 0, (ctx.g.exp(x) - 1.0) * alpha, x)


@onnx_op("Selu")
@computed_in_f32
def selu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return ctx.g.where(x <= 0, (ctx.g.exp(x) - 1.0) * (alpha * gamma), x * gamma)


@onnx_op("Celu")
@computed_in_f32
def celu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ctx.g.max(x, 0.0) + ctx.g.min((ctx.g.exp(x / alpha) - 1.0) * alpha, 0.0)


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx):
    x = ctx.input(0)
    return ctx.g.where(x > float(ctx.attr("alpha", 1.0)), x, 0.0)


@onnx_op("HardSigmoid")
@computed_in_f32
def hard_sigmoid(ctx):
    x = ctx.input(0)
    y = x * float(ctx.attr("alpha", 0.2)) + float(ctx.attr("beta", 0.5))
    return ctx.g.min(ctx.g.max(y, 0.0), 1.0)


@onnx_op("HardSwish")
@computed_in_f32
def hard_swish(ctx):
    x = ctx.input(0)
    return x * ctx.g.min(ctx.g.max(x * (1 / 6) + 0.5, 0.0), 1.0)


@onnx_op("Softsign")
@computed_in_f32
def softsign(ctx):
    x = ctx.input(0)
    return x / (ctx.g.abs(x) + 1.0)


@onnx_op("Mish")
@computed_in_f32
def mish(ctx):
    x = ctx.input(0)
    return x * ctx.g.tanh(ctx.g.softplus(x))


@onnx_op("Swish")
@computed_in_f32
def swish(ctx):
    x = ctx.input(0)
    return x * ctx.g.sigmoid(x * float(ctx.attr("alpha", 1.0)))


@onnx_op("SwiGLU")
@computed_in_f32
def swiglu(ctx):
    a, b = ctx.input(0), ctx.input(1)
    if a.dims != b.dims or a.dtype != b.dtype:
        raise ctx.error(f"SwiGLU needs A and B of one shape and dtype, got {a.dims} {a.dtype} and "
                        f"{b.dims} {b.dtype}")
    return a * ctx.g.sigmoid(a * float(ctx.attr("alpha", 1.0))) * b


@onnx_op("Shrink")
@computed_in_f32
def shrink(ctx):
    x = ctx.input(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
    return ctx.g.where(x < -lambd, x + bias, ctx.g.where(x > lambd, x - bias, 0))


@onnx_op("Clip")
def clip(ctx):
    x = ctx.input(0)
    lo, hi = ctx.input(1), ctx.input(2)
    if lo is not None:
        x = ctx.g.max(x, lo)
    if hi is not None:
        x = ctx.g.min(x, hi)
    return x


@onnx_op("IsNaN")
def isnan(ctx):
    x = ctx.input(0)
    return ctx.g.ne(x, x)


@onnx_op("IsInf")
def isinf(ctx):
    x = ctx.input(0)
    pos, neg = bool(ctx.attr("detect_positive", 1)), bool(ctx.attr("detect_negative", 1))
    hits = ([ctx.g.eq(x, math.inf)] if pos else []) + ([ctx.g.eq(x, -math.inf)] if neg else [])
    if not hits:
        return ctx.g.lt(x, x)  # false everywhere, nan included
    return hits[0] if len(hits) == 1 else ctx.g.logical_or(*hits)


# --- bitwise ------------------------------------------------------------------------------
@onnx_op("BitwiseNot")
def bitwise_not(ctx):
    """``~x`` = ``-x - 1`` in two's complement, ``max - x`` for unsigned integers."""
    x = ctx.input(0)
    if not x.dtype.is_int:
        raise ctx.unsupported(f"BitwiseNot of {x.dtype} (integers only)")
    if x.dtype.is_signed:
        return -x - ctx.g.as_value(1, x.dtype)
    return ctx.g.as_value(np.iinfo(x.dtype.np).max, x.dtype) - x


@onnx_op("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def bitwise_binary(ctx):
    """On the operands' bits (in i64: ``floor(x / 2**k) mod 2`` is bit k of the two's
    complement for negative x too; bit 63 of an i64 is its sign), recombined with the
    bits' weights and wrapped back into the dtype."""
    g = ctx.g
    a, b = ctx.input(0), ctx.input(1)
    if not a.dtype.is_int or a.dtype != b.dtype:
        raise ctx.unsupported(f"{ctx.op_type} of {a.dtype} and {b.dtype} (one integer dtype)")
    n_bits = 8 * a.dtype.itemsize
    low = min(n_bits, 63)
    powers = np.array([1 << k for k in range(low)], np.int64)

    def bits(v):
        wide = g.unsqueeze(g.cast(v, DType.I64), [-1])
        out = g.mod(_floor_div(ctx, wide, g.constant(powers)), g.as_value(2, DType.I64))
        if n_bits == 64:
            out = g.concat([out, g.cast(wide < 0, DType.I64)], axis=-1)
        return out

    x, y = bits(a), bits(b)
    combined = {"BitwiseAnd": lambda: x * y, "BitwiseOr": lambda: g.max(x, y),
                "BitwiseXor": lambda: g.mod(x + y, g.as_value(2, DType.I64))}[ctx.op_type]()
    weights = np.array([1 << k for k in range(n_bits)], np.uint64).view(np.int64)  # bit 63 weighs -2**63
    return g.cast(g.sum(combined * g.constant(weights), [-1]), a.dtype)

"""ONNX op converters: one small function per op type (see ``onnx.py`` for the context).

A converter returns graph values, or numpy arrays for results known at import time.
Definitions follow the ONNX operator specification for opsets >= 13.
"""
from __future__ import annotations

import numpy as np

from .onnx import onnx_dtype, onnx_op

# --- elementwise -------------------------------------------------------------------------
_UNARY = {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
          "Sin": "sin", "Cos": "cos", "Tan": "tan", "Atan": "atan", "Tanh": "tanh", "Sigmoid": "sigmoid",
          "Relu": "relu", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
          "Not": "logical_not", "Softplus": "softplus"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor", "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt",
           "GreaterOrEqual": "ge"}


@onnx_op(*_UNARY)
def unary(ctx):
    return getattr(ctx.g, _UNARY[ctx.node.op_type])(ctx.input(0))


@onnx_op(*_BINARY)
def binary(ctx):
    return getattr(ctx.g, _BINARY[ctx.node.op_type])(ctx.input(0), ctx.input(1))


@onnx_op("Pow")
def pow_(ctx):
    base, exponent = ctx.input(0), ctx.input(1)
    return ctx.g.pow(base, ctx.g.cast(exponent, base.dtype))  # ONNX: the result has the base's type


@onnx_op("Mod")
def mod(ctx):
    return ctx.g.mod(ctx.input(0), ctx.input(1), fmod=bool(ctx.attr("fmod", 0)))


@onnx_op("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    fn = {"Max": ctx.g.max, "Min": ctx.g.min, "Sum": ctx.g.add, "Mean": ctx.g.add}[ctx.node.op_type]
    xs = ctx.inputs()
    acc = xs[0]
    for x in xs[1:]:
        acc = fn(acc, x)
    return acc / float(len(xs)) if ctx.node.op_type == "Mean" else acc


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
    return ctx.g.cast(ctx.input(0), ctx.input(1).dtype)


@onnx_op("Gelu")
def gelu(ctx):
    approx = ctx.attr("approximate", "none")
    return ctx.g.gelu_tanh(ctx.input(0)) if approx == "tanh" else ctx.g.gelu(ctx.input(0))


@onnx_op("LeakyRelu")
def leaky_relu(ctx):
    x = ctx.input(0)
    return ctx.g.where(x < 0, x * float(ctx.attr("alpha", 0.01)), x)


@onnx_op("PRelu")
def prelu(ctx):
    x, slope = ctx.input(0), ctx.input(1)
    return ctx.g.where(x < 0, x * slope, x)


@onnx_op("Elu")
def elu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ctx.g.where(x < 0, (ctx.g.exp(x) - 1.0) * alpha, x)


@onnx_op("Selu")
def selu(ctx):
    x = ctx.input(0)
    alpha, gamma = float(ctx.attr("alpha", 1.67326319217681884765625)), float(ctx.attr("gamma", 1.05070102214813232421875))
    return ctx.g.where(x <= 0, (ctx.g.exp(x) - 1.0) * (alpha * gamma), x * gamma)


@onnx_op("Celu")
def celu(ctx):
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ctx.g.max(x, 0.0) + ctx.g.min(ctx.g.exp(x / alpha) * alpha - alpha, 0.0)


@onnx_op("ThresholdedRelu")
def thresholded_relu(ctx):
    x = ctx.input(0)
    return ctx.g.where(x > float(ctx.attr("alpha", 1.0)), x, 0.0)


@onnx_op("HardSigmoid")
def hard_sigmoid(ctx):
    x = ctx.input(0)
    y = x * float(ctx.attr("alpha", 0.2)) + float(ctx.attr("beta", 0.5))
    return ctx.g.min(ctx.g.max(y, 0.0), 1.0)


@onnx_op("HardSwish")
def hard_swish(ctx):
    x = ctx.input(0)
    return x * ctx.g.min(ctx.g.max(x * (1 / 6) + 0.5, 0.0), 1.0)


@onnx_op("Softsign")
def softsign(ctx):
    x = ctx.input(0)
    return x / (ctx.g.abs(x) + 1.0)


@onnx_op("Mish")
def mish(ctx):
    x = ctx.input(0)
    return x * ctx.g.tanh(ctx.g.softplus(x))


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
    hits = []
    if pos:
        hits.append(ctx.g.eq(x, float("inf")))
    if neg:
        hits.append(ctx.g.eq(x, float("-inf")))
    if not hits:
        return ctx.g.lt(x, x)  # false everywhere, nan included
    return hits[0] if len(hits) == 1 else ctx.g.logical_or(*hits)


# --- constants and shapes ----------------------------------------------------------------
@onnx_op("Constant")
def constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in ctx.attrs:
            v = ctx.attrs[key]
            if key.startswith("value_int"):
                return np.asarray(v, dtype=np.int64)
            if key.startswith("value_float"):
                return np.asarray(v, dtype=np.float32)
            return np.asarray(v)
    raise ctx.error(f"unsupported Constant attribute(s) {sorted(ctx.attrs)}")


@onnx_op("Shape")
def shape(ctx):
    dims = np.asarray(ctx.input(0).dims, dtype=np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return dims[start:end]


@onnx_op("Size")
def size(ctx):
    return np.asarray(int(np.prod(ctx.input(0).dims, dtype=np.int64)), dtype=np.int64)


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx):
    value = ctx.attr("value", np.zeros(1, np.float32))
    return np.full(tuple(int(d) for d in ctx.const(0)), value.reshape(()), dtype=value.dtype)


@onnx_op("Range")
def range_(ctx):
    start, limit, delta = (ctx.const(i) for i in range(3))
    return np.arange(start, limit, delta).astype(np.asarray(start).dtype)

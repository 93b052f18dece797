"""Reductions and ops along an axis: Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax,
CumSum/CumProd, TopK, the loss functions, LpNormalization.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ir.ops.reduce import reduced_dims
from ...ir.shape import normalize_axes, normalize_axis
from ..onnx import computed_in_f32, onnx_op

# ONNX op -> (reduction applied to the prepared input, value of an empty reduction)
_EMPTY = {"ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceProd": 1.0,
          "ReduceMean": np.nan, "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf, "ReduceMax": -np.inf,
          "ReduceMin": np.inf}


def _reduce_axes(ctx, x):
    """The reduced axes (canonical), or None for "return x unchanged" (empty axes with
    ``noop_with_empty_axes``). Axes are an input from opset 18 (13 for ReduceSum)."""
    axes = ctx.const_ints(1) if ctx.has(1) else ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        axes = range(x.rank)
    return normalize_axes(list(axes), x.rank, f"{ctx.op_type} axes")


@onnx_op(*_EMPTY)
@computed_in_f32
def reduce(ctx):
    x = ctx.input(0)
    axes = _reduce_axes(ctx, x)
    if axes is None:
        return x
    keep = bool(ctx.attr("keepdims", 1))
    if any(x.dims[a] == 0 for a in axes):
        return _empty_reduction(ctx, x, axes, keep)
    g, op = ctx.g, ctx.op_type
    if op == "ReduceLogSumExp":
        return _log_sum_exp(g, x, axes, keep)
    if x.dtype.is_int and op in ("ReduceL2", "ReduceLogSum"):  # float math, converted back as ONNX does
        return g.cast(_float_reduction(g, op, g.cast(x, DType.F64), axes, keep), x.dtype)
    return _float_reduction(g, op, x, axes, keep)


def _float_reduction(g, op, x, axes, keep):
    if op in ("ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin"):
        kind = {"ReduceSum": g.sum, "ReduceMean": g.mean, "ReduceProd": g.prod, "ReduceMax": g.reduce_max,
                "ReduceMin": g.reduce_min}[op]
        return kind(x, axes, keep)
    if op == "ReduceSumSquare":
        return g.sum(x * x, axes, keep)
    if op == "ReduceL1":
        return g.sum(g.abs(x), axes, keep)
    if op == "ReduceL2":
        return g.sqrt(g.sum(x * x, axes, keep))
    return g.log(g.sum(x, axes, keep))  # ReduceLogSum


def _log_sum_exp(g, x, axes, keep):
    """``log(sum(exp(x - m))) + m`` with m the largest finite-or--inf element (ONNX's
    reference: infinities do not shift)."""
    m = g.reduce_max(g.where(g.eq(g.abs(x), np.inf), -np.inf, x), axes, True)
    m = g.where(g.eq(m, -np.inf), 0.0, m)
    out = g.log(g.sum(g.exp(x - m), axes, True)) + m
    return out if keep else g.reshape(out, reduced_dims(x.dims, axes, False))


def _empty_reduction(ctx, x, axes, keep):
    """Reducing over an axis of size 0 gives the op's identity (-inf for max, or the
    dtype's minimum for integers, ...), as ONNX defines it."""
    value = _EMPTY[ctx.op_type]
    if x.dtype is DType.BOOL:
        value = value > 0  # max of nothing is False (any), min is True (all)
    elif x.dtype.is_int and not np.isfinite(value):
        if np.isnan(value):
            raise ctx.unsupported(f"{ctx.op_type} of an empty integer tensor")
        info = np.iinfo(x.dtype.np)
        value = info.min if value < 0 else info.max
    return np.full(reduced_dims(x.dims, axes, keep), value, dtype=x.dtype.np)


@onnx_op("ArgMax", "ArgMin")
def arg_extremum(ctx):
    """``select_last_index`` searches the reversed axis and maps the index back."""
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", 0), x.rank, f"{ctx.op_type} axis")
    keep = bool(ctx.attr("keepdims", 1))
    fn = ctx.g.argmax if ctx.op_type == "ArgMax" else ctx.g.argmin
    if not ctx.attr("select_last_index", 0):
        return fn(x, axis, keep)
    n = x.dims[axis]
    flipped = ctx.g.slice(x, [n - 1], [-n - 1], [-1], axes=[axis])
    return (n - 1) - fn(flipped, axis, keep)


# --- softmax family ---------------------------------------------------------------------------
@onnx_op("Softmax", "LogSoftmax")
def softmax(ctx):
    fn = ctx.g.softmax if ctx.op_type == "Softmax" else ctx.g.log_softmax
    return fn(ctx.input(0), axis=ctx.attr("axis", -1))


@onnx_op("Hardmax")
def hardmax(ctx):
    """1 at the first largest element along ``axis``, 0 elsewhere."""
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, "Hardmax axis")
    positions = np.arange(x.dims[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(x.rank)])
    hot = ctx.g.eq(ctx.g.argmax(x, axis, True), ctx.g.constant(positions))
    return ctx.g.cast(hot, x.dtype)


# --- scans ------------------------------------------------------------------------------
@onnx_op("CumSum")
def cumsum(ctx):
    x = ctx.input(0)
    axis = int(ctx.const(1).reshape(-1)[0])
    return ctx.g.cumsum(x, axis, exclusive=bool(ctx.attr("exclusive", 0)), reverse=bool(ctx.attr("reverse", 0)))


@onnx_op("CumProd")
def cumprod(ctx):
    """Running product by doubling (Hillis-Steele): after the steps with shifts 1, 2,
    4 ... < n, element i holds the product of elements i-2^k+1 .. i. Exact for integers
    (wrapping multiplication is associative); floats may round differently from a
    sequential product, by a few ulp."""
    x = ctx.input(0)
    axis = normalize_axis(int(ctx.const(1).reshape(-1)[0]), x.rank, "CumProd axis")
    n, g = x.dims[axis], ctx.g
    if ctx.attr("reverse", 0):
        x = _flip(g, x, axis)
    if ctx.attr("exclusive", 0):
        x = _shift_in_ones(g, x, axis, 1)
    shift = 1
    while shift < n:
        x = x * _shift_in_ones(g, x, axis, shift)
        shift *= 2
    return _flip(g, x, axis) if ctx.attr("reverse", 0) else x


def _flip(g, x, axis):
    n = x.dims[axis]
    return g.slice(x, [n - 1], [-n - 1], [-1], axes=[axis]) if n else x


def _shift_in_ones(g, x, axis, shift):
    """``x`` moved ``shift`` places along ``axis``, ones filling the start."""
    n = x.dims[axis]
    kept = g.slice(x, [0], [n - min(shift, n)], axes=[axis])
    ones = np.ones(x.dims[:axis] + (min(shift, n),) + x.dims[axis + 1:], x.dtype.np)
    return g.concat([g.constant(ones), kept], axis=axis)


@onnx_op("TopK")
def topk(ctx):
    """ONNX leaves the order of ``sorted=0`` results unspecified: they come sorted."""
    x = ctx.input(0)
    k = int(ctx.const(1).reshape(-1)[0])
    return ctx.g.topk(x, k, axis=ctx.attr("axis", -1), largest=bool(ctx.attr("largest", 1)), sorted=True)


# --- losses and norms --------------------------------------------------------------------------
@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(ctx):
    return _nll(ctx, ctx.input(0), ctx.input(1), ctx.input(2))


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx):
    log_prob = ctx.g.log_softmax(ctx.input(0), axis=1)
    loss = _nll(ctx, log_prob, ctx.input(1), ctx.input(2))
    return [loss, log_prob] if ctx.wants(1) else [loss]


def _nll(ctx, log_prob, target, weight):
    """``loss[n, d] = -log_prob[n, target[n, d], d] * weight[target[n, d]]`` (0 where the
    target is ``ignore_index``), then ``reduction``: none, sum, or mean (the sum divided by
    the sum of the weights used)."""
    g = ctx.g
    if log_prob.rank < 2 or target.dims != log_prob.dims[:1] + log_prob.dims[2:]:
        raise ctx.error(f"input {list(log_prob.dims)} and target {list(target.dims)} do not fit "
                        f"(input [N, C, d...], target [N, d...])")
    target = g.cast(target, DType.I64)
    ignore = ctx.attr("ignore_index")
    ignored = g.eq(target, ignore) if ignore is not None else None
    safe = g.where(ignored, 0, target) if ignored is not None else target
    picked = g.reshape(g.gather_elements(log_prob, g.unsqueeze(safe, [1]), axis=1), target.dims)
    w = g.gather(weight, safe) if weight is not None else None
    if ignored is not None:
        w = g.where(ignored, 0.0, w if w is not None else 1.0)
        w = g.cast(w, log_prob.dtype)
    loss = -picked if w is None else -picked * w
    reduction = ctx.attr("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return g.sum(loss)
    if reduction != "mean":
        raise ctx.error(f"reduction must be none, sum or mean, got {reduction!r}")
    return g.mean(loss) if w is None else g.sum(loss) / g.sum(g.expand(w, loss.dims))


@onnx_op("LpNormalization")
@computed_in_f32
def lp_normalization(ctx):
    x = ctx.input(0)
    axis, p = ctx.attr("axis", -1), ctx.attr("p", 2)
    if p not in (1, 2):
        raise ctx.error(f"LpNormalization p must be 1 or 2, got {p}")
    norm = ctx.g.sum(ctx.g.abs(x), [axis], True) if p == 1 else ctx.g.sqrt(ctx.g.sum(x * x, [axis], True))
    return ctx.g.where(ctx.g.eq(norm, 0.0), 0.0, x / norm)


@onnx_op("MeanVarianceNormalization")
@computed_in_f32
def mean_variance_normalization(ctx):
    """``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over ``axes`` (ONNX's function body)."""
    x = ctx.input(0)
    axes = ctx.attr("axes", [0, 2, 3])
    mean = ctx.g.mean(x, axes, True)
    var = ctx.g.mean(x * x, axes, True) - mean * mean
    return (x - mean) / (ctx.g.sqrt(var) + 1e-9)

"""Matrix products: MatMul, Gemm, MatMulInteger and Einsum (lowered to transposes,
reshapes, diagonal masks, sums and batched matmuls)."""
from __future__ import annotations

import math
import string

import numpy as np

from ...ir.dtypes import DType
from ...ir.shape import broadcast_dims
from ..onnx import onnx_op


@onnx_op("MatMul")
def matmul(ctx):
    return ctx.g.matmul(ctx.input(0), ctx.input(1))


@onnx_op("Gemm")
def gemm(ctx):
    """``alpha * A' @ B' + beta * C`` with ``A' = A.T`` if ``transA`` (likewise B)."""
    g = ctx.g
    a, b, c = ctx.input(0), ctx.input(1), ctx.input(2)
    if ctx.attr("transA", 0):
        a = g.transpose(a)
    if ctx.attr("transB", 0):
        b = g.transpose(b)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    y = g.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is None or beta == 0.0:
        return y
    return y + (c if beta == 1.0 else c * beta)


@onnx_op("MatMulInteger")
def matmul_integer(ctx):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in exact i32 arithmetic; a 1-D
    ``a_zero_point`` is per row of A, a 1-D ``b_zero_point`` per column of B."""
    g = ctx.g
    a, b = g.cast(ctx.input(0), DType.I32), g.cast(ctx.input(1), DType.I32)
    if ctx.has(2):
        zp = g.cast(ctx.input(2), DType.I32)
        a = a - (g.reshape(zp, [zp.dims[0], 1]) if zp.rank == 1 else zp)
    if ctx.has(3):
        b = b - g.cast(ctx.input(3), DType.I32)
    return g.matmul(a, b)


# --- einsum ------------------------------------------------------------------------------
@onnx_op("Einsum")
def einsum(ctx):
    operands = [x for x in ctx.inputs() if x is not None]
    terms, output = _parse_einsum(ctx, ctx.attr("equation"), operands)
    g = ctx.g
    items = [_prepare_operand(ctx, x, labels, [t for j, t in enumerate(terms) if j != i], output)
             for i, (x, labels) in enumerate(zip(operands, terms))]
    x, labels = items[0]
    for k, (y, y_labels) in enumerate(items[1:], start=1):
        later = set(output).union(*(set(t) for _, t in items[k + 1:]))
        x, labels = _contract(g, x, labels, y, y_labels, later)
    x, labels = _sum_out(g, x, labels, set(output))
    return g.transpose(x, [labels.index(c) for c in output]) if labels != output else x


def _parse_einsum(ctx, equation: str, operands) -> tuple[list[list[str]], list[str]]:
    """Per operand its axis labels, and the output's, with each ``...`` expanded into
    labels of its own (uppercase-free placeholders aligned from the right)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ctx.error(f"Einsum equation {equation!r} names {len(terms)} operands, the node has {len(operands)}")
    used = set(c for c in eq if c.isalpha())
    spare = iter(c for c in string.ascii_letters[::-1] + "".join(map(chr, range(0x100, 0x200))) if c not in used)
    ellipsis_rank = max((x.rank - len(t.replace("...", "")) for t, x in zip(terms, operands) if "..." in t),
                        default=0)
    ellipsis = [next(spare) for _ in range(ellipsis_rank)]
    parsed = []
    for t, x in zip(terms, operands):
        if "..." in t:
            before, after = t.split("...")
            n = x.rank - len(before) - len(after)
            labels = list(before) + ellipsis[ellipsis_rank - n:] + list(after)
        else:
            labels = list(t)
        if len(labels) != x.rank:
            raise ctx.error(f"Einsum term {t!r} does not match operand dims {list(x.dims)}")
        parsed.append(labels)
    if arrow:
        output = list(rhs.replace("...", "".join(ellipsis)))
    else:
        counts = {c: sum(labels.count(c) for labels in parsed) for c in used}
        output = ellipsis + sorted(c for c, n in counts.items() if n == 1)
    return parsed, output


def _prepare_operand(ctx, x, labels, other_terms, output):
    """Take diagonals of repeated labels, then sum labels no one else needs."""
    g = ctx.g
    labels = list(labels)
    while len(set(labels)) < len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        p = labels.index(c)
        q = labels.index(c, p + 1)
        n = x.dims[p]
        if x.dims[q] != n:
            raise ctx.error(f"Einsum label {c!r} repeats with sizes {x.dims[p]} and {x.dims[q]}")
        eye = np.eye(n, dtype=bool).reshape([n if i in (p, q) else 1 for i in range(x.rank)])
        x = g.sum(g.where(eye, x, g.constant(np.zeros((), x.dtype.np))), [q])
        del labels[q]
    needed = set(output).union(*(set(t) for t in other_terms))
    return _sum_out(g, x, labels, needed)


def _sum_out(g, x, labels, needed):
    gone = [i for i, c in enumerate(labels) if c not in needed]
    if not gone:
        return x, labels
    return g.sum(x, gone), [c for i, c in enumerate(labels) if i not in gone]


def _contract(g, a, la, b, lb, later):
    """``a`` and ``b`` as one batched matmul: [batch, a-only, k] @ [batch, k, b-only]."""
    batch = [c for c in la if c in lb and c in later]
    summed = [c for c in la if c in lb and c not in later]
    a_only = [c for c in la if c not in lb]
    b_only = [c for c in lb if c not in la]
    size = {c: n for c, n in zip(la, a.dims)}
    for c, n in zip(lb, b.dims):
        size[c] = broadcast_dims((size.get(c, n),), (n,), what="Einsum label sizes")[0]
    a = _arrange(g, a, la, batch + a_only + summed, size)
    b = _arrange(g, b, lb, batch + summed + b_only, size)
    nb, m, k, n = (math.prod(size[c] for c in cs) for cs in (batch, a_only, summed, b_only))
    y = g.matmul(g.reshape(a, [nb, m, k]), g.reshape(b, [nb, k, n]))
    out = batch + a_only + b_only
    return g.reshape(y, [size[c] for c in out]), out


def _arrange(g, x, labels, order, size):
    """``x`` transposed to ``order`` and broadcast to the labels' full sizes."""
    if labels != order:
        x = g.transpose(x, [labels.index(c) for c in order])
    dims = [size[c] for c in order]
    return g.expand(x, dims) if list(x.dims) != dims else x


@onnx_op("Det")
def det(ctx):
    """Determinant of ``[..., M, M]`` by Gaussian elimination with partial pivoting,
    unrolled over the M columns: the determinant is the product of the pivots, its sign
    flipped by every row swap. A zero pivot column gives 0 (the matrix is singular)."""
    g = ctx.g
    a = ctx.input(0)
    m = a.dims[-1]
    if a.rank < 2 or a.dims[-2] != m:
        raise ctx.error(f"Det needs square matrices [..., M, M], got {list(a.dims)}")
    batch = a.dims[:-2]
    rows = np.arange(m, dtype=np.int64)
    result = g.constant(np.ones(batch, a.dtype.np))
    for k in range(m):
        column = g.reshape(g.slice(a, [k], [k + 1], axes=[-1]), batch + (m,))
        candidates = g.where(g.constant(rows >= k), g.abs(column), g.as_value(-1.0, a.dtype))
        pivot_row = g.argmax(candidates, -1, True)  # [..., 1]
        swap = g.where(g.eq(g.constant(rows), g.as_value(k, DType.I64)), pivot_row,
                       g.where(g.eq(g.constant(rows), pivot_row), g.as_value(k, DType.I64), g.constant(rows)))
        a = g.gather_elements(a, g.expand(g.unsqueeze(swap, [-1]), a.dims), axis=-2)
        pivot = g.reshape(g.slice(g.slice(a, [k], [k + 1], axes=[-2]), [k], [k + 1], axes=[-1]), batch)
        flipped = g.ne(g.reshape(pivot_row, batch), g.as_value(k, DType.I64))
        result = result * pivot * g.where(flipped, g.as_value(-1.0, a.dtype), g.as_value(1.0, a.dtype))
        safe = g.where(g.eq(pivot, 0.0), g.as_value(1.0, a.dtype), pivot)
        column = g.slice(a, [k], [k + 1], axes=[-1])  # [..., M, 1], after the swap
        factors = g.where(g.constant((rows > k).reshape(m, 1)), column / g.reshape(safe, batch + (1, 1)),
                          g.as_value(0.0, a.dtype))
        a = a - factors * g.slice(a, [k], [k + 1], axes=[-2])
    return result

"""Reductions and other kernels along axes: reduce_sum/mean/prod/max/min, argmax/argmin,
softmax/log_softmax, cumsum and topk.

A reduction's output element reduces ``R`` input elements. Short reductions run one
work-item per output element; long ones one work-group per output element (each
work-item folds a strided share, then a tree in local memory). Integers accumulate in
the unsigned type of their width (so they wrap), 16-bit floats in f32 (rounded once),
``max``/``min`` propagate nan. ``cumsum`` adds in order, as numpy does; ``topk`` ranks
every element against its row (ties: the lower index first; nan is the largest).
"""
from __future__ import annotations

import math

from rlx_core.ir import DType, Ref

from .base import KernelContext, groups, idx_type, linear_loop, strides_of, unravel
from .types import UNSIGNED, ctype, is_complex, literal, load, lowest, highest, real_ctype, store

__all__ = ["GENERATORS", "acc_type", "combine", "wg_reduce", "local_size"]

LONG_REDUCTION = 128  # reductions at least this long get a work-group per output element
_CPREFIX = {DType.C64: "c64", DType.C128: "c128"}


def acc_type(dt: DType) -> str:
    """The C type a sum or product of ``dt`` accumulates in."""
    if dt.is_int or dt is DType.BOOL:
        return UNSIGNED[dt]
    return ctype(dt)


def combine(kind: str, dt: DType, a: str, b: str) -> str:
    """The expression folding ``b`` into accumulator ``a`` (both of the accumulator type)."""
    if kind in ("sum", "mean"):
        return f"(({a}) + ({b}))"
    if kind == "prod":
        if is_complex(dt):
            return f"{_CPREFIX[dt]}_mul({a}, {b})"
        return f"(({a}) * ({b}))"
    op = ">" if kind == "max" else "<"
    if dt.is_float:
        return f"((({a}) {op} ({b}) || isnan({a})) ? ({a}) : ({b}))"
    return f"((({a}) {op} ({b})) ? ({a}) : ({b}))"


def identity(kind: str, dt: DType) -> str:
    t = acc_type(dt)  # sums and products of integers: their unsigned type
    if kind in ("sum", "mean"):
        return literal(dt, 0) if not (dt.is_int or dt is DType.BOOL) else f"(({t})0)"
    if kind == "prod":
        return literal(dt, 1) if not (dt.is_int or dt is DType.BOOL) else f"(({t})1)"
    return lowest(dt) if kind == "max" else highest(dt)


def local_size(n: int, cap: int = 256) -> int:
    """The power of two work-group size for a row of ``n`` elements (at least 2)."""
    return max(2, min(cap, 1 << max(0, (n - 1).bit_length())))


def wg_reduce(var: str, buf: str, size: int, fold) -> str:
    """Statements reducing ``var`` over the work-group (``buf``: __local array of
    ``size``); afterwards every work-item holds the result in ``var``."""
    return (f"    {buf}[lid] = {var}; barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int s = {size // 2}; s > 0; s >>= 1) {{\n"
            f"      if (lid < s) {buf}[lid] = {fold(f'{buf}[lid]', f'{buf}[lid + s]')};\n"
            f"      barrier(CLK_LOCAL_MEM_FENCE);\n    }}\n"
            f"    {var} = {buf}[0]; barrier(CLK_LOCAL_MEM_FENCE);")


def pairwise_sum(var: str, t: str, n: int, elem, idx: str = "int") -> str:
    """Statements declaring ``var`` = the sum of ``elem(j)`` for j < n, added in numpy's
    order for a contiguous float sum of up to 128 elements (eight interleaved partial sums,
    then a fixed tree; sequential below 8), so short sums round exactly as the reference's.
    Longer sums are added in order."""
    if n < 8 or n > 128:
        return f"    {t} {var} = 0;\n    for ({idx} j = 0; j < {n}; j++) {var} += {elem('j')};\n"
    p = f"{var}_r"
    lines = [f"    {t} " + ", ".join(f"{p}{q} = {elem(str(q))}" for q in range(8)) + ";"]
    full = n - n % 8
    if full > 8:
        adds = " ".join(f"{p}{q} += {elem(f'j + {q}')};" for q in range(8))
        lines.append(f"    for ({idx} j = 8; j < {full}; j += 8) {{ {adds} }}")
    lines.append(f"    {t} {var} = (({p}0 + {p}1) + ({p}2 + {p}3)) + (({p}4 + {p}5) + ({p}6 + {p}7));")
    if n % 8:
        lines.append(f"    for ({idx} j = {full}; j < {n}; j++) {var} += {elem('j')};")
    return "\n".join(lines) + "\n"


def _offset(coords, strides) -> str:
    terms = [c if s == 1 else f"({c}) * {s}" for c, s in zip(coords, strides) if s != 0]
    return " + ".join(terms) or "0"


# --- reduce_* ---------------------------------------------------------------------------------
def reduce_kernel(k: KernelContext) -> None:
    kind = k.node.kind.split("_")[1]
    x, out = k.inputs[0], k.out
    axes = k.node.attrs["axes"]
    dt = x.dtype
    kept = [d for i, d in enumerate(x.dims) if i not in axes]
    red = [x.dims[i] for i in axes]
    st = strides_of(x.dims)
    kst = [st[i] for i in range(x.rank) if i not in axes]
    rst = [st[i] for i in axes]
    m, r = math.prod(kept), math.prod(red)
    if m == 0:
        return
    idx = idx_type(x.size)
    wraps = (dt.is_int or dt is DType.BOOL) and kind in ("sum", "prod")
    t = acc_type(dt) if wraps else ctype(dt)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    base = _offset(unravel("o", kept, idx), kst)
    roff = _offset(unravel("j", red, idx), rst)
    value = load(dt, "x", f"base + {roff}" if roff != "0" else "base")
    if wraps:
        value = f"(({t})({value}))"
    fold = lambda a, b: combine(kind, dt, a, b)  # noqa: E731
    final = "acc"
    if kind == "mean":
        final = f"(acc / ({real_ctype(dt)}){r})"
    if wraps:
        final = f"(({ctype(dt)})acc)"
    if r >= LONG_REDUCTION and m * 4 < r * k.dev.compute_units * 64:
        size = local_size(r, min(256, k.dev.max_work_group))
        body = (f"  __local {t} red[{size}];\n  const int lid = get_local_id(0);\n"
                f"  for ({idx} o = get_group_id(0); o < {m}; o += get_num_groups(0)) {{\n"
                f"    const {idx} base = {base};\n    {t} acc = {identity(kind, dt)};\n"
                f"    for ({idx} j = lid; j < {r}; j += {size}) acc = {fold('acc', value)};\n"
                f"{wg_reduce('acc', 'red', size, fold)}\n"
                f"    if (lid == 0) {{ {store(dt, 'out', 'o', final)} }}\n  }}")
        k.kernel(params, body, min(m, k.max_groups()) * size, size)
        return
    trailing = list(axes) == list(range(x.rank - len(axes), x.rank))
    if kind in ("sum", "mean") and dt.is_float and trailing:
        elem = lambda j: load(dt, "x", f"base + {j}")  # noqa: E731
        body = (f"    const {idx} base = {base};\n{pairwise_sum('acc', t, r, elem, idx)}"
                f"    {store(dt, 'out', 'o', final)}")
    else:
        body = (f"    const {idx} base = {base};\n    {t} acc = {identity(kind, dt)};\n"
                f"    for ({idx} j = 0; j < {r}; j++) acc = {fold('acc', value)};\n"
                f"    {store(dt, 'out', 'o', final)}")
    k.kernel(params, linear_loop("o", m, idx, body), groups(m, k.wg, k.max_groups()), k.wg)


# --- along one axis ---------------------------------------------------------------------------
def _rows(k: KernelContext):
    """(x, its dtype, outer, axis length, inner): the node's input ``x`` around the node's ``axis``."""
    x = k.inputs[0]
    axis = k.node.attrs["axis"]
    return x, x.dtype, math.prod(x.dims[:axis]), x.dims[axis], math.prod(x.dims[axis + 1:])


def arg_kernel(k: KernelContext) -> None:
    x, dt, outer, a, inner = _rows(k)
    m = outer * inner
    if m == 0:
        return
    idx = idx_type(x.size)
    op = ">" if k.node.kind == "argmax" else "<"
    c = ctype(dt)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("out", DType.I64), Ref(k.node.id))]
    take = f"v {op} best"
    if dt.is_float:
        take = f"(isnan(v) && !isnan(best)) || (!isnan(best) && v {op} best)"
    base = f"(o / {inner}) * {a * inner} + (o % {inner})"
    if a >= 1024 and m * 8 < k.dev.compute_units * 64:
        # long rows, few of them: a work-group per row, (value, index) pairs reduced in a tree;
        # the lower index wins ties and the first nan wins, as in the sequential scan
        size = local_size(a, min(256, k.dev.max_work_group))
        nan = ("if (isnan(bv) != isnan(ov)) { if (isnan(ov)) { bv = ov; bi = oi; } } else "
               "if (isnan(bv) || bv == ov) { if (oi < bi) { bv = ov; bi = oi; } } else ") if dt.is_float else \
            "if (bv == ov) { if (oi < bi) { bv = ov; bi = oi; } } else "
        body = f"""  __local {c} rv[{size}];
  __local long ri[{size}];
  const int lid = get_local_id(0);
  for ({idx} o = get_group_id(0); o < {m}; o += get_num_groups(0)) {{
    const {idx} base = {base};
    {c} best = {load(dt, 'x', 'base')}; long at = 0;
    for ({idx} j = lid; j < {a}; j += {size}) {{
      const {c} v = {load(dt, 'x', f'base + j * {inner}')};
      if (j == lid || {take}) {{ best = v; at = j; }}
    }}
    rv[lid] = best; ri[lid] = at; barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = {size // 2}; s > 0; s >>= 1) {{
      if (lid < s && lid + s < {a}) {{
        {c} bv = rv[lid]; long bi = ri[lid];
        const {c} ov = rv[lid + s]; const long oi = ri[lid + s];
        {nan}if (ov {op} bv) {{ bv = ov; bi = oi; }}
        rv[lid] = bv; ri[lid] = bi;
      }}
      barrier(CLK_LOCAL_MEM_FENCE);
    }}
    if (lid == 0) out[o] = ri[0];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}"""
        k.kernel(params, body, min(m, k.max_groups()) * size, size)
        return
    body = (f"    const {idx} base = {base};\n"
            f"    {c} best = {load(dt, 'x', 'base')}; long at = 0;\n"
            f"    for ({idx} j = 1; j < {a}; j++) {{\n"
            f"      const {c} v = {load(dt, 'x', f'base + j * {inner}')};\n"
            f"      if ({take}) {{ best = v; at = j; }}\n    }}\n"
            f"    out[o] = at;")
    k.kernel(params, linear_loop("o", m, idx, body), groups(m, k.wg, k.max_groups()), k.wg)


def softmax_kernel(k: KernelContext) -> None:
    x, dt, outer, a, inner = _rows(k)
    rows = outer * inner
    if rows == 0 or a == 0:
        return
    t = ctype(dt)
    idx = idx_type(x.size)
    size = local_size(a, min(256, k.dev.max_work_group)) if a >= 32 else 1
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    at = f"base + j * {inner}" if inner != 1 else "base + j"
    mx = lambda p, q: combine("max", dt, p, q)  # noqa: E731
    add = lambda p, q: f"(({p}) + ({q}))"  # noqa: E731
    if k.node.kind == "softmax":
        write = f"exp({load(dt, 'x', at)} - m) / s"
    else:
        write = f"({load(dt, 'x', at)} - m) - log(s)"
    if size == 1:
        body = (f"    const {idx} base = (o / {inner}) * {a * inner} + (o % {inner});\n"
                f"    {t} m = -INFINITY;\n"
                f"    for ({idx} j = 0; j < {a}; j++) m = {mx('m', load(dt, 'x', at))};\n"
                + (pairwise_sum("s", t, a, lambda j: f"exp({load(dt, 'x', f'base + {j}')} - m)", idx) if inner == 1
                   else f"    {t} s = 0;\n    for ({idx} j = 0; j < {a}; j++) s += exp({load(dt, 'x', at)} - m);\n") +
                f"    for ({idx} j = 0; j < {a}; j++) {{ {store(dt, 'out', at, write)} }}")
        k.kernel(params, linear_loop("o", rows, idx, body), groups(rows, k.wg, k.max_groups()), k.wg)
        return
    body = (f"  __local {t} red[{size}];\n  const int lid = get_local_id(0);\n"
            f"  for ({idx} o = get_group_id(0); o < {rows}; o += get_num_groups(0)) {{\n"
            f"    const {idx} base = (o / {inner}) * {a * inner} + (o % {inner});\n"
            f"    {t} m = -INFINITY;\n"
            f"    for ({idx} j = lid; j < {a}; j += {size}) m = {mx('m', load(dt, 'x', at))};\n"
            f"{wg_reduce('m', 'red', size, mx)}\n"
            f"    {t} s = 0;\n"
            f"    for ({idx} j = lid; j < {a}; j += {size}) s += exp({load(dt, 'x', at)} - m);\n"
            f"{wg_reduce('s', 'red', size, add)}\n"
            f"    for ({idx} j = lid; j < {a}; j += {size}) {{ {store(dt, 'out', at, write)} }}\n  }}")
    k.kernel(params, body, min(rows, k.max_groups()) * size, size)


def cumsum_kernel(k: KernelContext) -> None:
    a = k.node.attrs
    x, dt, outer, n, inner = _rows(k)
    rows = outer * inner
    if rows == 0 or n == 0:
        return
    idx = idx_type(x.size)
    t = acc_type(dt)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    j = f"({n - 1} - t)" if a["reverse"] else "t"
    at = f"base + {j} * {inner}"
    value = load(dt, "x", at)
    if dt.is_int:
        value = f"(({t})({value}))"
    result = f"(({ctype(dt)})acc)" if dt.is_int else "acc"
    if a["exclusive"]:
        step = f"{{ {store(dt, 'out', at, result)} acc = acc + {value}; }}"
    else:
        step = f"{{ acc = acc + {value}; {store(dt, 'out', at, result)} }}"
    zero = f"(({t})0)" if dt.is_int else literal(dt, 0)
    body = (f"    const {idx} base = (o / {inner}) * {n * inner} + (o % {inner});\n"
            f"    {t} acc = {zero};\n"
            f"    for ({idx} t = 0; t < {n}; t++) {step}")
    k.kernel(params, linear_loop("o", rows, idx, body), groups(rows, k.wg, k.max_groups()), k.wg)


def topk_kernel(k: KernelContext) -> None:
    a = k.node.attrs
    kk = a["k"]
    x, dt, outer, n, inner = _rows(k)
    if outer * inner == 0 or kk == 0:
        return
    idx = idx_type(x.size)
    c = ctype(dt)
    if a["largest"]:
        better = "(vi > vj)"
        if dt.is_float:
            better = "((isnan(vi) && !isnan(vj)) || vi > vj)"
    else:
        better = "(vi < vj)"
        if dt.is_float:
            better = "((!isnan(vi) && isnan(vj)) || vi < vj)"
    same = "(vi == vj || (isnan(vi) && isnan(vj)))" if dt.is_float else "(vi == vj)"
    vals, inds = Ref(k.node.id, 0), Ref(k.node.id, 1)
    if a["sorted"]:
        tv, ti = vals, inds
    else:
        tv, ti = k.scratch(kk * outer * inner * dt.itemsize), k.scratch(kk * outer * inner * 8)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (k.buf("vals", dt), tv), (k.buf("inds", DType.I64), ti)]
    total = outer * n * inner
    body = (f"    const {idx} o = e / {n * inner}, jj = (e / {inner}) % {n}, in_ = e % {inner};\n"
            f"    const {idx} base = o * {n * inner} + in_;\n"
            f"    const {c} vj = {load(dt, 'x', 'e')};\n"
            f"    {idx} rank = 0;\n"
            f"    for ({idx} i = 0; i < {n} && rank < {kk}; i++) {{\n"
            f"      const {c} vi = {load(dt, 'x', f'base + i * {inner}')};\n"
            f"      if ({better} || ({same} && i < jj)) rank++;\n    }}\n"
            f"    if (rank < {kk}) {{\n"
            f"      const {idx} at = o * {kk * inner} + rank * {inner} + in_;\n"
            f"      {store(dt, 'vals', 'at', 'vj')} inds[at] = (long)jj;\n    }}")
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)
    if a["sorted"]:
        return
    params = [(k.buf("tv", dt, True), tv), (k.buf("ti", DType.I64, True), ti),
              (k.buf("vals", dt), vals), (k.buf("inds", DType.I64), inds)]
    total = outer * kk * inner
    body = (f"    const {idx} o = e / {kk * inner}, in_ = e % {inner};\n"
            f"    const {idx} base = o * {kk * inner} + in_;\n"
            f"    const long me = ti[e];\n    {idx} pos = 0;\n"
            f"    for ({idx} u = 0; u < {kk}; u++) if (ti[base + u * {inner}] < me) pos++;\n"
            f"    const {idx} at = base + pos * {inner};\n"
            f"    {store(dt, 'vals', 'at', load(dt, 'tv', 'e'))} inds[at] = me;")
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


GENERATORS = {**{f"reduce_{kind}": reduce_kernel for kind in ("sum", "mean", "prod", "max", "min")},
              "argmax": arg_kernel, "argmin": arg_kernel, "softmax": softmax_kernel,
              "log_softmax": softmax_kernel, "cumsum": cumsum_kernel, "topk": topk_kernel}

"""Reductions and the other along-axis kinds: reduce_*, argmax/argmin, softmax,
log_softmax, cumsum and topk.

A *row* is the set of elements one output reduces (the reduced axes at fixed kept
coordinates). Row reductions run one workgroup per row: each invocation folds a
strided share of the row, then a tree in workgroup memory combines the shares, so
long rows are spread over the whole workgroup. The workgroup is the next power of
two >= the row length, at most 256. 16-bit floats are computed in f32 and rounded once
when stored; bool extrema are u32 max/min over 0/1 words (any / all); i64 accumulates
exactly in ``vec2<u32>`` (``rlx_wgpu.codegen.int64``).
"""
from __future__ import annotations

import math

from rlx_core.ir import DType

from .base import KernelContext, generator
from .int64 import I64, I64_IDENTITY, I64_OPS
from .wgsl import WORKGROUP, grid, i32, linear_id, ravel, row_id, shader, strides, u32, unravel

__all__ = ["rows", "tree", "workgroup_for", "row_kernel", "acc_type", "acc_load", "acc_store"]

_NEG_INF, _POS_INF = "bitcast<f32>(0xff800000u)", "bitcast<f32>(0x7f800000u)"


def rows(dims, axes) -> tuple[int, int, str, str]:
    """``(row count, row length, base(row), offset(r))``: the input element of reduced
    element ``r`` of row ``row`` is ``base + offset``."""
    st = strides(dims)
    kept = [a for a in range(len(dims)) if a not in axes]
    kept_dims, red_dims = [dims[a] for a in kept], [dims[a] for a in axes]
    base = ravel(unravel("row", kept_dims), [st[a] for a in kept])
    return math.prod(kept_dims), math.prod(red_dims), base, ravel(unravel("r", red_dims), [st[a] for a in axes])


def workgroup_for(length: int) -> int:
    return min(WORKGROUP, 1 << max(0, length - 1).bit_length())


def tree(part: str, combine: str, wg: int) -> list[str]:
    """Lines folding ``part[0..wg)`` into ``part[0]`` with ``combine`` (``{0}``, ``{1}``);
    expects ``part[lid]`` written and ends with a barrier."""
    lines, s = ["workgroupBarrier();"], wg // 2
    while s >= 1:
        folded = combine.format(f"{part}[lid]", f"{part}[lid + {u32(s)}]")
        lines += [f"if (lid < {u32(s)}) {{ {part}[lid] = {folded}; }}", "workgroupBarrier();"]
        s //= 2
    return lines


def row_kernel(k: KernelContext, count: int, wg: int, bindings, slots, decls: str, lines: list[str]) -> None:
    """One workgroup of ``wg`` invocations per row (``row < count``) running ``lines``."""
    if count == 0:
        return
    body = (f"  let row = {row_id()};\n  if (row >= {u32(count)}) {{ return; }}\n"
            + "".join(f"  {line}\n" for line in lines))
    k.emit(shader(bindings, body, wg, decls), slots, grid(count, 1, k.max_grid))


def strided_loop(var: str, length: int, wg: int, inner: str) -> str:
    """A loop of each invocation over its share ``var = lid, lid + wg, ...`` of ``length``."""
    return f"for (var {var} = lid; {var} < {u32(length)}; {var} = {var} + {u32(wg)}) {{ {inner} }}"


# --- accumulator types --------------------------------------------------------------------------
def acc_type(dtype: DType) -> str:
    return {DType.F32: "f32", DType.F16: "f32", DType.I32: "i32", DType.U32: "u32", DType.BOOL: "u32",
            DType.C64: "vec2<f32>", DType.I64: I64}[dtype]


def acc_load(dtype: DType, expr: str) -> str:
    return f"f32({expr})" if dtype is DType.F16 else expr


def acc_store(dtype: DType, expr: str) -> str:
    return f"f16({expr})" if dtype is DType.F16 else expr


_IDENTITY = {  # (kind, accumulator type) -> initial value
    ("sum", "f32"): "0.0f", ("sum", "i32"): "0i", ("sum", "u32"): "0u", ("sum", "vec2<f32>"): "vec2<f32>()",
    ("prod", "f32"): "1.0f", ("prod", "i32"): "1i", ("prod", "u32"): "1u",
    ("prod", "vec2<f32>"): "vec2<f32>(1.0f, 0.0f)",
    ("max", "f32"): _NEG_INF, ("max", "i32"): i32(-2**31), ("max", "u32"): "0u",
    ("min", "f32"): _POS_INF, ("min", "i32"): i32(2**31 - 1), ("min", "u32"): "0xffffffffu",
    **{(op, I64): value for op, value in I64_IDENTITY.items()},
}
_COMBINE = {("sum", None): "{0} + {1}", ("prod", None): "{0} * {1}", ("prod", "vec2<f32>"): "rlx_cmul({0}, {1})",
            ("max", "f32"): "rlx_max({0}, {1})", ("min", "f32"): "rlx_min({0}, {1})",
            ("max", None): "max({0}, {1})", ("min", None): "min({0}, {1})",
            ("sum", I64): I64_OPS["add"], ("prod", I64): I64_OPS["mul"], ("max", I64): I64_OPS["max"],
            ("min", I64): I64_OPS["min"]}


def combine(op: str, t: str) -> str:
    return _COMBINE.get((op, t)) or _COMBINE[(op, None)]


@generator("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min")
def reduce(k: KernelContext) -> None:
    x, out = k.ins[0], k.outs[0]
    op = {"reduce_sum": "sum", "reduce_mean": "sum", "reduce_prod": "prod", "reduce_max": "max",
          "reduce_min": "min"}[k.node.kind]
    count, length, base, offset = rows(x.dims, k.attrs["axes"])
    t, wg = acc_type(x.dtype), workgroup_for(length)
    fold = combine(op, t)
    result = "part[0]"
    if k.node.kind == "reduce_mean":  # 0 / 0 = nan for an empty mean (written out: drivers differ)
        result = f"part[0] / f32({length})" if length else f"{t}(bitcast<f32>(0x7fc00000u))"
    lines = [f"let base = {base};", f"var acc = {_IDENTITY[(op, t)]};",
             strided_loop("r", length, wg, f"acc = {fold.format('acc', acc_load(x.dtype, f'x[base + {offset}]'))};"),
             "part[lid] = acc;", *tree("part", fold, wg),
             f"if (lid == 0u) {{ out[row] = {acc_store(out.dtype, result)}; }}"]
    st = k.storage(x.dtype)
    row_kernel(k, count, wg, [("x", st), ("out", st)], [k.input(0), k.output()],
               f"var<workgroup> part: array<{t}, {wg}>;\n", lines)


def _better(kind: str, t: str) -> str:
    """Whether value ``{0}`` beats ``{1}`` for argmax/argmin (nan beats every number)."""
    cmp = ">" if kind == "argmax" else "<"
    if t == "f32":
        return f"(rlx_isnan({{0}}) && !rlx_isnan({{1}})) || ({{0}} {cmp} {{1}})"
    if t == I64:
        return I64_OPS["gt" if kind == "argmax" else "lt"]
    return f"({{0}} {cmp} {{1}})"


@generator("argmax", "argmin")
def arg_extremum(k: KernelContext) -> None:
    """Each invocation keeps the best (value, index) of its share, then a tree merges them;
    on equal values (nan included) the lower index wins."""
    x = k.ins[0]
    count, length, base, offset = rows(x.dims, (k.attrs["axis"],))
    t, wg = acc_type(x.dtype), workgroup_for(length)
    better = _better(k.node.kind, t)

    def takes(v, i, cand_v, cand_i) -> str:
        """Whether candidate (cand_v, cand_i) replaces (v, i)."""
        return f"({better.format(cand_v, v)}) || (!({better.format(v, cand_v)}) && {cand_i} < {i})"
    lines = [f"let base = {base};", f"var best = {acc_load(x.dtype, 'x[base]')};", "var at = 0u;",
             strided_loop("r", length, wg, f"let v = {acc_load(x.dtype, f'x[base + {offset}]')}; "
                                           f"if ({takes('best', 'at', 'v', 'r')}) {{ best = v; at = r; }}"),
             "vals[lid] = best;", "idxs[lid] = at;", "workgroupBarrier();"]
    s = wg // 2
    while s >= 1:
        other = f"lid + {u32(s)}"
        lines += [f"if (lid < {u32(s)} && ({takes('vals[lid]', 'idxs[lid]', f'vals[{other}]', f'idxs[{other}]')})) "
                  f"{{ vals[lid] = vals[{other}]; idxs[lid] = idxs[{other}]; }}", "workgroupBarrier();"]
        s //= 2
    lines.append("if (lid == 0u) { out[row] = vec2<u32>(idxs[0], 0u); }")
    row_kernel(k, count, wg, [("x", k.storage(x.dtype)), ("out", "vec2<u32>")], [k.input(0), k.output()],
               f"var<workgroup> vals: array<{t}, {wg}>;\nvar<workgroup> idxs: array<u32, {wg}>;\n", lines)


@generator("softmax", "log_softmax")
def softmax(k: KernelContext) -> None:
    """max, then sum of exp(x - max), then each output: two workgroup folds per row."""
    x, axis = k.ins[0], k.attrs["axis"]
    count, length, base, _ = rows(x.dims, (axis,))
    step = strides(x.dims)[axis]
    wg = workgroup_for(length)
    at = f"base + r * {u32(step)}"
    value = acc_load(x.dtype, f"x[{at}]")
    result = "exp(v - top) / total" if k.node.kind == "softmax" else "(v - top) - log(total)"
    lines = [f"let base = {base};", f"var m = {_NEG_INF};",
             strided_loop("r", length, wg, f"m = rlx_max(m, {value});"),
             "part[lid] = m;", *tree("part", "rlx_max({0}, {1})", wg), "let top = part[0];", "workgroupBarrier();",
             "var s = 0.0f;", strided_loop("r", length, wg, f"s = s + exp({value} - top);"),
             "part[lid] = s;", *tree("part", "{0} + {1}", wg), "let total = part[0];",
             strided_loop("r", length, wg, f"let v = {value}; out[{at}] = {acc_store(x.dtype, result)};")]
    st = k.storage(x.dtype)
    row_kernel(k, count if length else 0, wg, [("x", st), ("out", st)], [k.input(0), k.output()],
               f"var<workgroup> part: array<f32, {wg}>;\n", lines)


@generator("cumsum")
def cumsum(k: KernelContext) -> None:
    """One invocation per row scans it in order (the reference's order of additions)."""
    x, a = k.ins[0], k.attrs
    count, length, base, _ = rows(x.dims, (a["axis"],))
    if count == 0 or length == 0:
        return
    step = strides(x.dims)[a["axis"]]
    t = acc_type(x.dtype)
    r = f"({u32(length - 1)} - t)" if a["reverse"] else "t"
    add = f"acc = {combine('sum', t).format('acc', acc_load(x.dtype, 'x[at]'))};"
    write = f"out[at] = {acc_store(x.dtype, 'acc')};"
    body = (f"  let row = {linear_id()};\n  if (row >= {u32(count)}) {{ return; }}\n  let base = {base};\n"
            f"  var acc = {_IDENTITY[('sum', t)]};\n"
            f"  for (var t = 0u; t < {u32(length)}; t = t + 1u) {{\n    let at = base + {r} * {u32(step)};\n"
            f"    {write + ' ' + add if a['exclusive'] else add + ' ' + write}\n  }}")
    st = k.storage(x.dtype)
    k.emit(shader([("x", st), ("out", st)], body), [k.input(0), k.output()], grid(count, WORKGROUP, k.max_grid))


def _precedes(largest: bool, t: str) -> str:
    """Whether element ``j`` (value ``xj``) comes before element ``e`` (``xe``) in topk's
    order: better value first (nan above every number), equal values by index."""
    if t == "f32":
        nan = "(rlx_isnan(xj) && !rlx_isnan(xe))" if largest else "(!rlx_isnan(xj) && rlx_isnan(xe))"
        equal = "((rlx_isnan(xj) && rlx_isnan(xe)) || xj == xe)"
        return f"{nan} || (xj {'>' if largest else '<'} xe) || ({equal} && j < e)"
    if t == I64:
        better = I64_OPS["gt" if largest else "lt"].format("xj", "xe")
        return f"{better} || (all(xj == xe) && j < e)"
    return f"(xj {'>' if largest else '<'} xe) || (xj == xe && j < e)"


@generator("topk")
def topk(k: KernelContext) -> None:
    """Each element counts the row's elements that precede it (its rank); ranks below k
    are written at their rank (sorted) or, unsorted, at the count of kept elements
    before them in index order (a second pass over ranks kept in scratch)."""
    x, a = k.ins[0], k.attrs
    axis, kk, n = a["axis"], a["k"], x.dims[a["axis"]]
    count, _, base, _ = rows(x.dims, (axis,))
    if count == 0 or kk == 0:
        return
    step, out_step = strides(x.dims)[axis], strides(k.outs[0].dims)[axis]
    out_base = rows(k.outs[0].dims, (axis,))[2]
    t = acc_type(x.dtype)
    st = k.storage(x.dtype)
    head = (f"  let i = {linear_id()};\n  if (i >= {u32(count * n)}) {{ return; }}\n"
            f"  let row = i / {u32(n)};\n  let e = i % {u32(n)};\n  let base = {base};\n"
            f"  let xe = {acc_load(x.dtype, f'x[base + e * {u32(step)}]')};\n")
    rank = (f"  var rank = 0u;\n  for (var j = 0u; j < {u32(n)}; j = j + 1u) {{\n"
            f"    let xj = {acc_load(x.dtype, f'x[base + j * {u32(step)}]')};\n"
            f"    if ({_precedes(a['largest'], t)}) {{ rank = rank + 1u; }}\n  }}\n")
    write = (f"  let o = {out_base} + pos * {u32(out_step)};\n"
             f"  vals[o] = x[base + e * {u32(step)}];\n  idxs[o] = vec2<u32>(e, 0u);")
    outs = [("vals", st), ("idxs", "vec2<u32>")]
    grid_ = grid(count * n, WORKGROUP, k.max_grid)
    if a["sorted"]:
        body = head + rank + f"  if (rank >= {u32(kk)}) {{ return; }}\n  let pos = rank;\n" + write
        k.emit(shader([("x", st)] + outs, body), [k.input(0), k.output(0), k.output(1)], grid_)
        return
    ranks = k.scratch(4 * count * n)
    k.emit(shader([("x", st), ("ranks", "u32")], head + rank + "  ranks[i] = rank;"), [k.input(0), ranks], grid_)
    position = (f"  let rank = ranks[i];\n  if (rank >= {u32(kk)}) {{ return; }}\n  var pos = 0u;\n"
                f"  for (var j = 0u; j < e; j = j + 1u) {{ if (ranks[row * {u32(n)} + j] < {u32(kk)}) "
                "{ pos = pos + 1u; } }\n")
    k.emit(shader([("x", st), ("ranks", "u32")] + outs, head + position + write),
           [k.input(0), ranks, k.output(0), k.output(1)], grid_)

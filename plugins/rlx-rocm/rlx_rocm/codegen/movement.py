"""Data movement: transpose, slice, expand, concat, split, pad, frame, gather,
gather_elements (raw element copies: every dtype moves as an unsigned word of its
size), and scatter_add (deterministic: each output element adds its updates in index
order, as ``np.add.at`` does).

Every kernel runs one work-item per output element with the source index computed from
the output coordinates; shapes and attributes are baked into the source.
"""
from __future__ import annotations

import numpy as np

from rlx_core.ir import DType, Ref
from rlx_core.reference.elementwise import cast_array

from .base import KernelContext, groups, idx_type, linear_loop, strides_of, unravel
from .elementwise import broadcast_index, expression
from .types import UNSIGNED, ctype, load, round_to, store

__all__ = ["GENERATORS", "raw", "copy_kernel"]

_RAW = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong", 16: "ulong2"}


def raw(dt: DType) -> str:
    """The unsigned C type of ``dt``'s size: elements move as bits."""
    return _RAW[dt.itemsize]


def _raw_buf(name: str, dt: DType, const: bool = False) -> str:
    return f"__global {'const ' if const else ''}{raw(dt)}* {name}"


def raw_literal(dt: DType, value) -> str:
    """The bits of ``value`` converted to ``dt`` (as ``cast`` converts) as a raw literal."""
    arr = np.asarray(cast_array(np.asarray(value), dt)).astype(dt.np).reshape(1)
    if dt.itemsize == 16:
        lo, hi = arr.view(np.uint64)[:2]
        return f"((ulong2)({int(lo)}UL, {int(hi)}UL))"
    bits = int(arr.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])[0])
    return f"(({raw(dt)}){bits}{'UL' if dt.itemsize == 8 else 'u'})"


def copy_kernel(k: KernelContext, out_ref: Ref, srcs: list[Ref], src_index, n: int, dims, extra: str = "",
                fill: str | None = None) -> None:
    """One work-item per output element of ``dims``: ``out[i] = src[j]``.

    ``src_index(coords) -> (source position, index expression, condition or None)``;
    where the condition is false the element is ``fill``."""
    dt = k.graph.shape_of(out_ref).dtype
    idx = idx_type(n, *(k.graph.shape_of(r).size for r in srcs))
    params = [(_raw_buf(f"in{i}", k.graph.shape_of(r).dtype, True), r) for i, r in enumerate(srcs)]
    params.append((_raw_buf("out", dt), out_ref))
    coords = [f"c{j}" for j in range(len(dims))]
    lines = [f"    const {idx} c{j} = {e};" for j, e in enumerate(unravel("i", dims, idx))]
    lines.append(extra)
    which, at, cond = src_index(coords)
    value = f"in{which}[{at}]"
    if cond is not None:
        value = f"({cond}) ? {value} : {fill}"
    lines.append(f"    out[i] = {value};")
    k.kernel(params, linear_loop("i", n, idx, "\n".join(lines)), groups(n, k.wg, k.max_groups()), k.wg)


def _offset(coords, strides) -> str:
    terms = [c if s == 1 else f"{c} * {s}" for c, s in zip(coords, strides) if s != 0]
    return " + ".join(terms) or "0"


def transpose(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    perm = k.node.attrs["perm"]
    st = strides_of(x.dims)
    copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]],
                lambda c: (0, _offset(c, [st[p] for p in perm]), None), out.size, out.dims)


def slice_(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    a = k.node.attrs
    st = strides_of(x.dims)

    def src(c):
        terms = []
        for j, (start, step, s) in enumerate(zip(a["starts"], a["steps"], st)):
            pos = c[j] if step == 1 else f"{c[j]} * ({step})"
            if start:
                pos = f"({start} + {pos})"
            terms.append(pos if s == 1 else f"{pos} * {s}")
        return 0, " + ".join(terms) or "0", None
    copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]], src, out.size, out.dims)


def expand(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]], lambda c: (0, broadcast_index(out.dims, x.dims, c), None),
                out.size, out.dims)


def concat(k: KernelContext) -> None:
    out, axis = k.out, k.node.attrs["axis"]
    dt = out.dtype
    refs = list(k.node.inputs)
    n = out.size
    idx = idx_type(n)
    params = [(_raw_buf(f"in{i}", dt, True), r) for i, r in enumerate(refs)]
    params.append((_raw_buf("out", dt), Ref(k.node.id)))
    coords = unravel("i", out.dims, idx)
    lines = [f"    const {idx} c{j} = {e};" for j, e in enumerate(coords)]
    cs = [f"c{j}" for j in range(len(coords))]
    start = 0
    branches = []
    for i, r in enumerate(refs):
        s = k.graph.shape_of(r)
        size = s.dims[axis]
        if size == 0:
            continue
        local = list(cs)
        local[axis] = f"(c{axis} - {start})" if start else f"c{axis}"
        at = _offset(local, strides_of(s.dims))
        branches.append((start + size, f"out[i] = in{i}[{at}];"))
        start += size
    text = ""
    for j, (end, stmt) in enumerate(branches):
        if j == len(branches) - 1:
            text += f"{{ {stmt} }}" if j else stmt
        else:
            text += f"if (c{axis} < {end}) {{ {stmt} }} else "
    lines.append("    " + text)
    k.kernel(params, linear_loop("i", n, idx, "\n".join(lines)), groups(n, k.wg, k.max_groups()), k.wg)


def split(k: KernelContext) -> None:
    x = k.inputs[0]
    axis = k.node.attrs["axis"]
    st = strides_of(x.dims)
    start = 0
    for j, out in enumerate(k.node.outputs):
        def src(c, s0=start):
            local = list(c)
            if s0:
                local[axis] = f"({c[axis]} + {s0})"
            return 0, _offset(local, st), None
        copy_kernel(k, Ref(k.node.id, j), [k.node.inputs[0]], src, out.size, out.dims)
        start += out.dims[axis]


def pad(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    a = k.node.attrs
    if x.rank == 0:
        copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]], lambda c: (0, "0", None), out.size, out.dims)
        return
    st = strides_of(x.dims)
    before, after = a["pads"][0::2], a["pads"][1::2]
    mode = a["mode"]
    extra, conds, pos = [], [], []
    for j, (b, e, n) in enumerate(zip(before, after, x.dims)):
        crop = -min(b, 0)
        kept = n + min(b, 0) + min(e, 0)
        grow = max(b, 0)
        p = f"p{j}"
        extra.append(f"    long {p} = (long)c{j} - {grow};")
        if mode == "constant":
            if max(b, 0) or max(e, 0):
                conds.append(f"{p} >= 0 && {p} < {kept}")
        elif mode == "edge":
            extra.append(f"    {p} = {p} < 0 ? 0 : ({p} >= {kept} ? {kept - 1} : {p});")
        else:  # reflect
            extra.append(f"    {p} = {p} < 0 ? -{p} : ({p} >= {kept} ? {2 * (kept - 1)} - {p} : {p});")
        pos.append(f"({p} + {crop})" if crop else p)
    fill = raw_literal(x.dtype, a["value"]) if mode == "constant" else None
    cond = " && ".join(f"({c})" for c in conds) or None
    copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]], lambda c: (0, _offset(pos, st), cond), out.size, out.dims,
                extra="\n".join(extra), fill=fill)


def frame(k: KernelContext) -> None:
    x, out = k.inputs[0], k.out
    a = k.node.attrs
    axis, hop = a["axis"], a["hop"]
    st = strides_of(x.dims)

    def src(c):
        local = c[:axis] + [f"({c[axis]} * {hop} + {c[axis + 1]})"] + c[axis + 2:]
        return 0, _offset(local, st), None
    copy_kernel(k, Ref(k.node.id), [k.node.inputs[0]], src, out.size, out.dims)


def _wrapped(var: str, expr: str, n: int) -> str:
    """A statement reading index ``expr`` into ``var``, + n when negative, clamped into
    ``[0, n - 1]``: the index ops' device mode (``rlx_core.ir.ops.movement``), for
    gathers and scatter_add alike."""
    hi = max(n - 1, 0)
    return (f"    long {var} = (long)({expr}); if ({var} < 0) {var} += {n}; "
            f"{var} = {var} < 0 ? 0 : ({var} > {hi} ? {hi} : {var});")


def gather(k: KernelContext) -> None:
    table, indices = k.inputs
    out, axis = k.out, k.node.attrs["axis"]
    st = strides_of(table.dims)
    ni = indices.rank
    ist = strides_of(indices.dims)

    def src(c):
        j = _offset(c[axis:axis + ni], ist)
        local = c[:axis] + ["r"] + c[axis + ni:]
        return 0, _offset(local, st), None
    extra = _wrapped("r", f"in1[{_offset([f'c{axis + m}' for m in range(ni)], ist)}]", table.dims[axis])
    _indexed_copy(k, [k.node.inputs[0], k.node.inputs[1]], indices.dtype, src, out, extra)


def gather_elements(k: KernelContext) -> None:
    x, indices = k.inputs
    out, axis = k.out, k.node.attrs["axis"]
    st = strides_of(x.dims)

    def src(c):
        local = list(c)
        local[axis] = "r"
        return 0, _offset(local, st), None
    extra = _wrapped("r", "in1[i]", x.dims[axis])
    _indexed_copy(k, [k.node.inputs[0], k.node.inputs[1]], indices.dtype, src, out, extra)


def _indexed_copy(k, refs, idx_dt, src, out, extra) -> None:
    """A copy whose second operand is an index tensor (read as its integer type)."""
    dt = out.dtype
    n = out.size
    idx = idx_type(n, *(k.graph.shape_of(r).size for r in refs))
    params = [(_raw_buf("in0", dt, True), refs[0]), (k.buf("in1", idx_dt, True), refs[1]),
              (_raw_buf("out", dt), Ref(k.node.id))]
    coords = [f"c{j}" for j in range(out.rank)]
    lines = [f"    const {idx} c{j} = {e};" for j, e in enumerate(unravel("i", out.dims, idx))]
    lines.append(extra)
    _, at, _ = src(coords)
    lines.append(f"    out[i] = in0[{at}];")
    k.kernel(params, linear_loop("i", n, idx, "\n".join(lines)), groups(n, k.wg, k.max_groups()), k.wg)


def scatter_add(k: KernelContext) -> None:
    data, indices, updates = k.inputs
    out, axis = k.out, k.node.attrs["axis"]
    dt = out.dtype
    n, m = out.size, indices.dims[0]
    idx = idx_type(n, updates.size)
    params = [(k.buf("data", dt, True), k.node.inputs[0]), (k.buf("ind", indices.dtype, True), k.node.inputs[1]),
              (k.buf("upd", dt, True), k.node.inputs[2]), (k.buf("out", dt), Ref(k.node.id))]
    coords = unravel("i", out.dims, idx)
    lines = [f"    const {idx} c{j} = {e};" for j, e in enumerate(coords)]
    ust = strides_of(updates.dims)
    local = [f"c{j}" for j in range(out.rank)]
    local[axis] = "j"
    t = ctype(dt)
    acc_dt = dt
    lines.append(f"    {t} acc = {load(dt, 'data', 'i')};")
    lines.append(f"    for ({idx} j = 0; j < {m}; j++) {{")
    lines.append("  " + _wrapped("r", "ind[j]", data.dims[axis]))
    lines.append(f"      if (r == (long)c{axis}) {{")
    u = load(dt, "upd", _offset(local, ust))
    if dt is DType.BOOL:
        lines.append(f"        acc = (uchar)(acc || {u});")
    else:
        node = _FakeAdd()
        lines.append(f"        acc = {expression(node, acc_dt, ['acc', u], {})};  // 16-bit floats: rounded once, by the store")
    lines.append("      }")
    lines.append("    }")
    lines.append("    " + store(dt, "out", "i", "acc"))
    k.kernel(params, linear_loop("i", n, idx, "\n".join(lines)), groups(n, k.wg, k.max_groups()), k.wg)


class _FakeAdd:
    kind = "add"
    attrs: dict = {}


GENERATORS = {"transpose": transpose, "slice": slice_, "expand": expand, "concat": concat, "split": split,
              "pad": pad, "frame": frame, "gather": gather, "gather_elements": gather_elements,
              "scatter_add": scatter_add}

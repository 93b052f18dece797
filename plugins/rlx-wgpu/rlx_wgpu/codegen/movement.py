"""Data movement: transpose, slice, concat, split, expand, pad, frame, gather,
gather_elements (pure index arithmetic, any dtype whose element is whole 32-bit words,
and f16) and scatter_add (which adds, so it runs on the compute dtypes).

Every mover runs one invocation per element it writes: it computes the destination
element ``d`` and the source element ``s`` and copies the element's words. Indices
(gather family) follow the ops' device mode (``rlx_core.ir.ops.movement``): a negative
index wraps once by adding the axis size, and the result is clamped into ``[0, n - 1]``;
i64 indices are read exactly (``rlx_index64``: the low word when the value fits in i32,
else the end its sign points to), so no index ever reads or writes out of bounds.
"""
from __future__ import annotations

import numpy as np

from rlx_core.ir import DType, Ref
from rlx_core.reference.elementwise import cast_array

from ..layout import layout, to_device
from .base import KernelContext, generator, load, store
from .reduce import acc_type, combine
from .wgsl import WORKGROUP, broadcast_index, f32, grid, i32, linear_id, ravel, shader, strides, u32, unravel

__all__ = ["element_unit", "movable"]


def element_unit(k: KernelContext, dtype: DType) -> tuple[str, int]:
    """How a mover addresses elements of ``dtype``: (binding element type, units per element)."""
    lay = k.layout(dtype)
    return ("u32", lay.words) if lay.words else (lay.storage, 1)


def movable(dtype: DType, f16: bool) -> bool:
    """Whether movers handle ``dtype``: elements of whole words, or f16 with ``shader-f16``."""
    lay = layout(dtype, f16)
    return bool(lay.words) or lay.storage == "f16"


def _copy(dst: str, d: str, src: str, s: str, units: int) -> str:
    if units == 1:
        return f"{dst}[{d}] = {src}[{s}];"
    return "\n  ".join(f"{dst}[{d} * {u32(units)} + {u32(j)}] = {src}[{s} * {u32(units)} + {u32(j)}];"
                       for j in range(units))


def _mover(k: KernelContext, count: int, bindings, slots, lines: list[str], move: str) -> None:
    """One invocation per ``i < count``: ``lines`` compute ``d`` and ``s``, ``move`` copies."""
    if count == 0:
        return
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(count)}) {{ return; }}\n"
            + "".join(f"  {line}\n" for line in lines) + f"  {move}")
    k.emit(shader(bindings, body), slots, grid(count, WORKGROUP, k.max_grid))


def _gather_like(k: KernelContext, source_index: str, extra=(), pre: tuple[str, ...] = ()) -> None:
    """Output element ``i`` copies source element ``source_index`` (input 0); ``extra`` are
    more (name, type, ref) bindings the index reads, ``pre`` lines run first."""
    out = k.outs[0]
    t, units = element_unit(k, out.dtype)
    bindings = [("src", t)] + [(n, ty) for n, ty, _ in extra] + [("out", t)]
    slots = [k.input(0)] + [r for _, _, r in extra] + [k.output()]
    _mover(k, out.size, bindings, slots, list(pre) + [f"let s = {source_index};"], _copy("out", "i", "src", "s", units))


@generator("transpose")
def transpose(k: KernelContext) -> None:
    x = k.ins[0]
    in_st = strides(x.dims)
    _gather_like(k, ravel(unravel("i", k.outs[0].dims), [in_st[p] for p in k.attrs["perm"]]))


@generator("expand")
def expand(k: KernelContext) -> None:
    _gather_like(k, broadcast_index("i", k.outs[0].dims, k.ins[0].dims))


@generator("slice")
def slice_(k: KernelContext) -> None:
    x, out = k.ins[0], k.outs[0]
    st = strides(x.dims)
    base = sum(start * s for start, s in zip(k.attrs["starts"], st))
    terms = [f"i32({c}) * {i32(step * s)}" for c, step, s in zip(unravel("i", out.dims), k.attrs["steps"], st)
             if c != "0u"]
    _gather_like(k, f"u32({' + '.join([i32(base)] + terms)})")


@generator("frame")
def frame(k: KernelContext) -> None:
    a, x, out = k.attrs, k.ins[0], k.outs[0]
    c = unravel("i", out.dims)
    axis = a["axis"]
    coords = c[:axis] + [f"({c[axis]} * {u32(a['hop'])} + {c[axis + 1]})"] + c[axis + 2:]
    _gather_like(k, ravel(coords, strides(x.dims)))


def _index(k: KernelContext, name: str, ref: Ref, at: str, n: int) -> str:
    """The element index (u32) into an axis of size ``n`` that the index at ``at`` of
    binding ``name`` selects, in the device mode (see the module docstring)."""
    helper = "rlx_index64" if k.graph.shape_of(ref).dtype is DType.I64 else "rlx_index"
    return f"{helper}({name}[{at}], {i32(n)})"


def _index_binding(k: KernelContext, name: str, i: int):
    return name, k.storage(k.ins[i].dtype), k.input(i)


@generator("gather")
def gather(k: KernelContext) -> None:
    table, idx, out = k.ins[0], k.ins[1], k.outs[0]
    axis = k.attrs["axis"]
    c = unravel("i", out.dims)
    lead, tail = c[:axis], c[axis + idx.rank:]
    at = ravel(c[axis:axis + idx.rank], strides(idx.dims))
    pre = (f"let j = {_index(k, 'idx', k.input(1), at, table.dims[axis])};",)
    coords = lead + ["j"] + tail
    _gather_like(k, ravel(coords, strides(table.dims)), [_index_binding(k, "idx", 1)], pre)


@generator("gather_elements")
def gather_elements(k: KernelContext) -> None:
    x, out = k.ins[0], k.outs[0]
    axis = k.attrs["axis"]
    c = unravel("i", out.dims)
    pre = (f"let j = {_index(k, 'idx', k.input(1), 'i', x.dims[axis])};",)
    coords = c[:axis] + ["j"] + c[axis + 1:]
    _gather_like(k, ravel(coords, strides(x.dims)), [_index_binding(k, "idx", 1)], pre)


@generator("concat")
def concat(k: KernelContext) -> None:
    """One dispatch per input, each copying it into its slice of the output."""
    _slab_copies(k, k.outs[0], k.ins, into_whole=True)


@generator("split")
def split(k: KernelContext) -> None:
    """One dispatch per output, each copying its slice of the input."""
    _slab_copies(k, k.ins[0], k.outs, into_whole=False)


def _slab_copies(k: KernelContext, whole, parts, into_whole: bool) -> None:
    """Copies between ``whole`` and its consecutive slices ``parts`` along ``axis``, one
    dispatch per part: into the whole (concat) or out of it (split)."""
    axis = k.attrs["axis"]
    t, units = element_unit(k, whole.dtype)
    whole_st, offset = strides(whole.dims), 0
    for i, part in enumerate(parts):
        c = unravel("i", part.dims)
        c[axis] = f"({c[axis]} + {u32(offset)})"
        pre = [f"let w = {ravel(c, whole_st)};"]
        if into_whole:
            _mover(k, part.size, [("src", t), ("out", t)], [k.input(i), k.output()], pre,
                   _copy("out", "w", "src", "i", units))
        else:
            _mover(k, part.size, [("src", t), ("out", t)], [k.input(0), k.output(i)], pre,
                   _copy("out", "i", "src", "w", units))
        offset += part.dims[axis]


@generator("pad")
def pad(k: KernelContext) -> None:
    a, x, out = k.attrs, k.ins[0], k.outs[0]
    t, units = element_unit(k, out.dtype)
    lines, inside, coords = [], [], []
    for axis, (c, n) in enumerate(zip(unravel("i", out.dims), x.dims)):
        before, after = a["pads"][2 * axis], a["pads"][2 * axis + 1]
        crop, grow, kept = max(-before, 0), max(before, 0), n + min(before, 0) + min(after, 0)
        lines.append(f"var p{axis} = i32({c}) - {i32(grow)};")
        if a["mode"] == "reflect":
            lines.append(f"p{axis} = select(p{axis}, -p{axis}, p{axis} < 0i);")
            lines.append(f"p{axis} = select(p{axis}, {i32(2 * (kept - 1))} - p{axis}, p{axis} >= {i32(kept)});")
        elif a["mode"] == "edge":
            lines.append(f"p{axis} = clamp(p{axis}, 0i, {i32(kept - 1)});")
        else:
            inside.append(f"p{axis} >= 0i && p{axis} < {i32(kept)}")
        coords.append(f"u32(p{axis} + {i32(crop)})")
    lines.append(f"let s = {ravel(coords, strides(x.dims))};")
    move = _copy("out", "i", "src", "s", units)
    if inside:
        fill = _fill_units(k, a["value"], out.dtype, t, units)
        move = (f"if ({' && '.join(inside)}) {{\n    {move}\n  }} else {{\n    "
                + "\n    ".join(f"out[i * {u32(units)} + {u32(j)}] = {v};" for j, v in enumerate(fill)) + "\n  }")
    _mover(k, out.size, [("src", t), ("out", t)], [k.input(0), k.output()], lines, move)


def _fill_units(k: KernelContext, value: float, dtype: DType, unit_type: str, units: int) -> list[str]:
    """The constant-pad value converted as ``cast`` does, as WGSL literals of its units."""
    element = cast_array(np.asarray(value), dtype)
    if unit_type == "f16":
        value = float(element)
        return [f"{value!r}h" if np.isfinite(value) else f"f16({f32(value)})"]
    words = to_device(element.reshape(1), dtype).view(np.uint32)
    return [u32(int(w)) for w in words[:units]]


@generator("scatter_add")
def scatter_add(k: KernelContext) -> None:
    """out[p, r, q] = data[p, r, q] + the updates[p, i, q] whose index is r, added in order."""
    data, idx, out = k.ins[0], k.ins[1], k.outs[0]
    axis, dt = k.attrs["axis"], out.dtype
    c = unravel("i", out.dims)
    upd_st = strides(k.ins[2].dims)
    at = ravel(c[:axis] + ["j"] + c[axis + 1:], upd_st)
    update = load(dt, f"upd[{at}]")
    added = f"acc || {update}" if dt is DType.BOOL else combine("sum", acc_type(dt)).format("acc", update)
    body = [f"var acc = {load(dt, 'data[i]')};",
            f"for (var j = 0u; j < {u32(idx.size)}; j = j + 1u) {{",
            f"  if ({_index(k, 'idx', k.input(1), 'j', data.dims[axis])} == {c[axis]}) {{",
            f"    acc = {added};",
            "  }", "}", f"out[i] = {store(dt, 'acc')};"]
    st = k.storage(dt)
    bindings = [("data", st), ("idx", k.storage(idx.dtype)), ("upd", st), ("out", st)]
    if out.size == 0:
        return
    src = (f"  let i = {linear_id()};\n  if (i >= {u32(out.size)}) {{ return; }}\n"
           + "".join(f"  {line}\n" for line in body))
    k.emit(shader(bindings, src), [k.input(0), k.input(1), k.input(2), k.output()],
           grid(out.size, WORKGROUP, k.max_grid))


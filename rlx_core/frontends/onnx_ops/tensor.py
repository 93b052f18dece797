"""Constants, shapes and data movement: Constant, Shape, Reshape, Transpose, Slice, Concat,
Split, Gather*, Scatter*, Expand, Tile, Pad, OneHot, Trilu and friends.

Shape-like inputs (a Reshape's shape, Slice's starts, Pad's pads ...) must be known at
import time: RLX graphs are statically shaped. The scatters are expressed with the
IR's ``scatter_add`` (index_add along one axis with 1-D indices) after flattening the
scattered axes into one, so every ONNX scatter variant becomes exact IR arithmetic.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.ops.movement import slice_bounds
from ...ir.shape import broadcast_dims, normalize_axis
from ..onnx import ModelDataError, foldable, onnx_dtype, onnx_op


# --- constants and shapes ----------------------------------------------------------------
@onnx_op("Constant")
def constant(ctx):
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in ctx.attrs:
            return np.asarray(ctx.attrs[key], dtype=dtype)
    raise ctx.unsupported(f"Constant attribute(s) {sorted(ctx.attrs)} (strings and sparse tensors have no "
                          f"RLX equivalent)")


@onnx_op("Shape")
def shape(ctx):
    dims = np.asarray(ctx.input(0).dims, dtype=np.int64)
    return dims[ctx.attr("start", 0):ctx.attr("end", None)]


@onnx_op("Size")
def size(ctx):
    return np.asarray(math.prod(ctx.input(0).dims), dtype=np.int64)


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx):
    """A constant, or (above the folding limit) a runtime expand of the scalar."""
    value = ctx.attr("value", np.zeros(1, np.float32)).reshape(())
    dims = ctx.const_ints(0)
    if any(d < 0 for d in dims):
        raise ctx.error(f"ConstantOfShape shape {list(dims)} has a negative dimension", ModelDataError)
    if foldable(dims, DType.of(value.dtype)):
        return np.full(dims, value, dtype=value.dtype)
    return ctx.g.expand(ctx.g.constant(value), dims)


@onnx_op("Range")
def range_(ctx):
    """``start + i * delta`` for ``i < ceil((limit - start) / delta)``: a constant, or
    (above the folding limit) a runtime ``arange`` (integers: exact i64 arithmetic on it)."""
    start, limit, delta = (np.asarray(ctx.const(i)).reshape(-1)[0] for i in range(3))
    if delta == 0:
        raise ctx.error(f"Range delta is 0 (start {start}, limit {limit}): the range never ends", ModelDataError)
    span = (float(limit) - float(start)) / float(delta)
    if not math.isfinite(span):
        raise ctx.error(f"Range from {start} to {limit} by {delta} has no finite length", ModelDataError)
    count = max(int(math.ceil(span)), 0)
    dtype = DType.of(start.dtype)
    if foldable((count,), dtype):
        return (start + np.arange(count) * delta).astype(start.dtype)
    if not dtype.is_int:
        return ctx.g.arange(count, float(start), float(delta), dtype)
    return ctx.g.cast(ctx.g.arange(count, dtype=DType.I64) * int(delta) + int(start), dtype)


@onnx_op("EyeLike")
def eye_like(ctx):
    x = ctx.input(0)
    if x.rank != 2:
        raise ctx.error(f"EyeLike needs a 2-D input, got {list(x.dims)}")
    dtype = onnx_dtype(ctx.attr("dtype")) if "dtype" in ctx.attrs else x.dtype
    return np.eye(*x.dims, k=ctx.attr("k", 0), dtype=dtype.np)


# --- reshaping --------------------------------------------------------------------------
@onnx_op("Reshape")
def reshape(ctx):
    x = ctx.input(0)
    dims = list(ctx.const_ints(1))
    if not ctx.attr("allowzero", 0):  # 0 copies the input's dim at that position
        dims = [x.dims[i] if d == 0 else d for i, d in enumerate(dims)]
    return ctx.g.reshape(x, dims)


@onnx_op("Flatten")
def flatten(ctx):
    x = ctx.input(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.rank if axis < 0 else axis
    return ctx.g.reshape(x, [math.prod(x.dims[:axis]), math.prod(x.dims[axis:])])


@onnx_op("Squeeze")
def squeeze(ctx):
    axes = ctx.const_ints(1)
    return ctx.g.squeeze(ctx.input(0), axes)


@onnx_op("Unsqueeze")
def unsqueeze(ctx):
    return ctx.g.unsqueeze(ctx.input(0), ctx.const_ints(1))


@onnx_op("Transpose")
def transpose(ctx):
    perm = ctx.attr("perm")
    return ctx.g.transpose(ctx.input(0), None if perm is None else list(perm))


@onnx_op("DepthToSpace")
def depth_to_space(ctx):
    x, b = ctx.input(0), ctx.attr("blocksize")
    n, c, h, w = _dims4(ctx, x)
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.g.transpose(ctx.g.reshape(x, [n, b, b, c // (b * b), h, w]), [0, 3, 4, 1, 5, 2])
    else:
        y = ctx.g.transpose(ctx.g.reshape(x, [n, c // (b * b), b, b, h, w]), [0, 1, 4, 2, 5, 3])
    return ctx.g.reshape(y, [n, c // (b * b), h * b, w * b])


@onnx_op("SpaceToDepth")
def space_to_depth(ctx):
    x, b = ctx.input(0), ctx.attr("blocksize")
    n, c, h, w = _dims4(ctx, x)
    y = ctx.g.reshape(x, [n, c, h // b, b, w // b, b])
    perm = [0, 1, 3, 5, 2, 4] if ctx.attr("mode", "DCR") == "CRD" else [0, 3, 5, 1, 2, 4]
    return ctx.g.reshape(ctx.g.transpose(y, perm), [n, c * b * b, h // b, w // b])


def _dims4(ctx, x):
    if x.rank != 4:
        raise ctx.error(f"{ctx.op_type} needs a 4-D input [N, C, H, W], got {list(x.dims)}")
    return x.dims


# --- slicing, joining, splitting ------------------------------------------------------------
@onnx_op("Slice")
def slice_(ctx):
    x = ctx.input(0)
    starts, ends = ctx.const_ints(1), ctx.const_ints(2)
    axes = ctx.const_ints(3, tuple(range(len(starts))))
    steps = ctx.const_ints(4, (1,) * len(starts))
    taken = [range(n) for n in x.dims]
    for axis, start, end, step in zip(ordered_axes(ctx, axes, x.rank), starts, ends, steps):
        if step == 0:
            raise ctx.error("Slice steps must not be 0")
        taken[axis] = onnx_slice_range(x.dims[axis], start, end, step)
    bounds = [slice_bounds(r, n) for r, n in zip(taken, x.dims)]
    return ctx.g.slice(x, *(list(col) for col in zip(*bounds))) if x.rank else x


def ordered_axes(ctx, axes, rank: int) -> list[int]:
    """``axes`` made non-negative, in the given order (they pair with other lists)."""
    out = [normalize_axis(int(a), rank, f"{ctx.op_type} axis") for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"axes {list(axes)} repeat an axis")
    return out


def onnx_slice_range(n: int, start: int, end: int, step: int) -> range:
    """The indices ONNX Slice takes from an axis of size ``n``: negative bounds count
    from the end, then start is clamped to [0, n] (step > 0) or [0, n-1] (step < 0) and
    end to [0, n] or [-1, n-1] -- which differs from Python's slicing for a negative
    step and a start below -n."""
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        return range(min(max(start, 0), n), min(max(end, 0), n), step)
    return range(min(max(start, 0), n - 1), min(max(end, -1), n - 1), step)


@onnx_op("Concat")
def concat(ctx):
    return ctx.g.concat([x for x in ctx.inputs() if x is not None], axis=ctx.attr("axis"))


@onnx_op("Split")
def split(ctx):
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", 0), x.rank, "Split axis")
    n = x.dims[axis]
    sizes = ctx.const_ints(1)
    if sizes is None:
        parts = ctx.attr("num_outputs", len(ctx.node.output))
        chunk = -(-n // parts)  # ceil: the last part may be smaller (opset 18)
        sizes = [min(chunk, n - i * chunk) for i in range(parts)]
        if ctx.version < 18 and n % parts:
            raise ctx.error(f"Split of {n} elements into {parts} equal parts")
    return ctx.g.split(x, list(sizes), axis=axis)


@onnx_op("CenterCropPad")
def center_crop_pad(ctx):
    x = ctx.input(0)
    target = ctx.const_ints(1)
    axes = ordered_axes(ctx, ctx.attr("axes", range(x.rank)), x.rank)
    pads = [[0, 0] for _ in x.dims]
    for axis, size in zip(axes, target):
        diff = size - x.dims[axis]  # > 0: pad, < 0: crop (a negative pad); the extra one goes last
        before = int(math.copysign(abs(diff) // 2, diff))
        pads[axis] = [before, diff - before]
    return ctx.g.pad(x, pads)


@onnx_op("Compress")
def compress(ctx):
    x, keep = ctx.input(0), ctx.const(1).astype(bool)
    axis = ctx.attr("axis")
    if axis is None:
        x, axis = ctx.g.reshape(x, [-1]), 0
    axis = normalize_axis(axis, x.rank, "Compress axis")
    indices = np.flatnonzero(keep[:x.dims[axis]]).astype(np.int64)
    return ctx.g.gather(x, indices, axis=axis)


# --- broadcasting -----------------------------------------------------------------------
@onnx_op("Expand")
def expand(ctx):
    x = ctx.input(0)
    return ctx.g.expand(x, broadcast_dims(x.dims, ctx.const_ints(1)))


@onnx_op("Tile")
def tile(ctx):
    """``x [d0, d1] -> reshape [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0 d0, r1 d1]``."""
    x = ctx.input(0)
    repeats = ctx.const_ints(1)
    if len(repeats) != x.rank:
        raise ctx.error(f"Tile repeats {list(repeats)} must have one entry per axis of {list(x.dims)}")
    spread = ctx.g.reshape(x, [d for n in x.dims for d in (1, n)])
    tiled = ctx.g.expand(spread, [d for r, n in zip(repeats, x.dims) for d in (r, n)])
    return ctx.g.reshape(tiled, [r * n for r, n in zip(repeats, x.dims)])


# --- padding ----------------------------------------------------------------------------
@onnx_op("Pad")
def pad(ctx):
    x = ctx.input(0)
    amounts = ctx.const_ints(1)
    axes = ordered_axes(ctx, ctx.const_ints(3, range(x.rank)), x.rank)
    if len(amounts) != 2 * len(axes):
        raise ctx.error(f"Pad pads {list(amounts)} must hold a begin and an end per padded axis ({len(axes)})")
    pads = [[0, 0] for _ in x.dims]
    for i, axis in enumerate(axes):
        pads[axis] = [amounts[i], amounts[i + len(axes)]]
    mode = ctx.attr("mode", "constant")
    if mode == "wrap":
        return _wrap_pad(ctx, x, pads)
    value = ctx.const(2)
    fill = 0.0 if value is None or value.size == 0 else np.asarray(value).reshape(-1)[0].item()
    if isinstance(fill, complex) or (x.dtype.is_int and fill != int(fill)):
        raise ctx.unsupported(f"Pad constant_value {fill!r} for {x.dtype}")
    return ctx.g.pad(x, pads, mode=mode, value=float(fill))


def _wrap_pad(ctx, x, pads):
    """Wrap mode: position i of the padded axis reads ``(i - before) mod n`` of the
    (cropped) axis: one gather per padded axis."""
    for axis, (before, after) in enumerate(pads):
        if before == after == 0:
            continue
        crop = [[0, 0] for _ in x.dims]
        crop[axis] = [min(before, 0), min(after, 0)]
        x = ctx.g.pad(x, crop) if min(before, after) < 0 else x
        n = x.dims[axis]
        if n == 0:
            raise ctx.error(f"wrap padding of axis {axis}, which is empty")
        idx = np.arange(-max(before, 0), n + max(after, 0), dtype=np.int64) % n
        x = ctx.g.gather(x, idx, axis=axis)
    return x


# --- masks and one-hot ------------------------------------------------------------------
@onnx_op("Trilu")
def trilu(ctx):
    x = ctx.input(0)
    k = int(ctx.const(1, np.int64(0)).reshape(()))
    rows, cols = x.dims[-2:]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = (j - i >= k) if ctx.attr("upper", 1) else (j - i <= k)
    return ctx.g.where(keep, x, ctx.g.constant(np.zeros((), x.dtype.np)))


@onnx_op("OneHot")
def one_hot(ctx):
    indices, values = ctx.input(0), ctx.input(2)
    depth = int(np.asarray(ctx.const(1)).reshape(-1)[0])
    axis = normalize_axis(ctx.attr("axis", -1), indices.rank + 1, "OneHot axis")
    idx = ctx.g.cast(indices, DType.I64)  # ONNX casts non-integer indices
    idx = ctx.g.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth, dtype=np.int64).reshape([depth if i == axis else 1
                                                          for i in range(indices.rank + 1)])
    hot = ctx.g.eq(ctx.g.unsqueeze(idx, [axis]), ctx.g.constant(positions))
    off, on = ctx.g.split(values, [1, 1])
    return ctx.g.where(hot, ctx.g.reshape(on, []), ctx.g.reshape(off, []))


@onnx_op("ReverseSequence")
def reverse_sequence(ctx):
    return reverse_within_lengths(ctx.g, ctx.input(0), ctx.input(1), ctx.attr("time_axis", 0),
                                  ctx.attr("batch_axis", 1))


def reverse_within_lengths(g, x, lens, time_axis: int, batch_axis: int):
    """Each batch entry b reverses its first ``lens[b]`` steps along ``time_axis``: one
    gather_elements with index ``lens[b] - 1 - t`` for ``t < lens[b]``, else ``t``."""
    t = np.arange(x.dims[time_axis], dtype=np.int64).reshape([-1 if i == time_axis else 1 for i in range(x.rank)])
    lens = g.reshape(g.cast(lens, DType.I64), [-1 if i == batch_axis else 1 for i in range(x.rank)])
    t = g.constant(t)
    idx = g.where(t < lens, lens - 1 - t, t)
    return g.gather_elements(x, g.expand(idx, x.dims), axis=time_axis)


# --- gathers ----------------------------------------------------------------------------
@onnx_op("Gather")
def gather(ctx):
    return ctx.g.gather(ctx.input(0), ctx.input(1), axis=ctx.attr("axis", 0))


@onnx_op("GatherElements")
def gather_elements(ctx):
    return ctx.g.gather_elements(ctx.input(0), ctx.input(1), axis=ctx.attr("axis", 0))


@onnx_op("GatherND")
def gather_nd(ctx):
    """``data [B..., D..., R...]``, ``indices [B..., Q..., k]`` -> ``[B..., Q..., R...]``: the
    k indexed axes (and the batch axes) are flattened into one, then one gather."""
    data, indices = ctx.input(0), ctx.input(1)
    nb, k = ctx.attr("batch_dims", 0), indices.dims[-1]
    flat, linear = _flat_positions(ctx, data, indices, nb)
    out = ctx.g.gather(flat, linear, axis=0)
    return ctx.g.reshape(out, indices.dims[:-1] + data.dims[nb + k:])


def in_range(g, idx, n: int):
    """``idx`` (i64) with negative entries + n, under the IR index ops' out-of-range
    semantics (host mode: ``InputError``; device mode: clamped into ``[0, n - 1]``): a
    gather from ``arange(n)``. Converters that fold several indexed axes into one flat
    position pass each axis's indices through this first, so that an index beyond its
    own axis never silently lands on another row."""
    return g.gather(g.constant(np.arange(n, dtype=np.int64)), idx)


def _flat_positions(ctx, data, indices, n_batch: int):
    """``data`` reshaped to ``[prod(B..., D...), R...]`` and the row each index tuple of
    ``indices [B..., Q..., k]`` selects (negative indices count from the end; each
    checked against its axis by ``in_range``)."""
    k = indices.dims[-1]
    batch, indexed = data.dims[:n_batch], data.dims[n_batch:n_batch + k]
    if indices.dims[:n_batch] != batch or k > len(data.dims) - n_batch:
        raise ctx.error(f"indices {list(indices.dims)} do not fit data {list(data.dims)} with "
                        f"batch_dims={n_batch}")
    idx = ctx.g.cast(indices, DType.I64)
    linear = ctx.g.constant(np.zeros(indices.dims[:-1], np.int64))
    for j, n in enumerate(indexed):
        column = ctx.g.gather(idx, np.int64(j), axis=idx.rank - 1)
        linear = linear + in_range(ctx.g, column, n) * math.prod(indexed[j + 1:])
    if n_batch:
        batch_pos = np.arange(math.prod(batch), dtype=np.int64).reshape(batch + (1,) * (linear.rank - n_batch))
        linear = linear + batch_pos * math.prod(indexed)
    flat = ctx.g.reshape(data, [math.prod(batch) * math.prod(indexed)] + list(data.dims[n_batch + k:]))
    return flat, linear


# --- scatters ---------------------------------------------------------------------------
@onnx_op("ScatterND")
def scatter_nd(ctx):
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    flat, linear = _flat_positions(ctx, data, indices, 0)
    rows = math.prod(linear.dims)
    upd = ctx.g.reshape(updates, [rows] + list(flat.dims[1:]))
    out = scatter_rows(ctx, flat, ctx.g.reshape(linear, [rows]), upd, ctx.attr("reduction", "none"))
    return ctx.g.reshape(out, data.dims)


@onnx_op("ScatterElements")
def scatter_elements(ctx):
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    axis = normalize_axis(ctx.attr("axis", 0), data.rank, "ScatterElements axis")
    idx = in_range(ctx.g, ctx.g.cast(indices, DType.I64), data.dims[axis])
    return _scatter_along(ctx, data, idx, updates, axis, ctx.attr("reduction", "none"))


@onnx_op("TensorScatter")
def tensor_scatter(ctx):
    """KV-cache write: ``update [B, ..., s, ...]`` goes to ``past [B, ..., S, ...]`` along
    ``axis`` starting at ``write_indices[b]`` (modulo S when ``mode="circular"``)."""
    past, update = ctx.input(0), ctx.input(1)
    axis = normalize_axis(ctx.attr("axis", -2), past.rank, "TensorScatter axis")
    if axis == 0:
        raise ctx.error("TensorScatter axis must not be the batch axis 0")
    start = ctx.input(2)
    start = ctx.g.constant(np.zeros(past.dims[:1], np.int64)) if start is None else ctx.g.cast(start, DType.I64)
    step = np.arange(update.dims[axis], dtype=np.int64).reshape([-1 if i == axis else 1 for i in range(past.rank)])
    pos = ctx.g.reshape(start, [past.dims[0]] + [1] * (past.rank - 1)) + step
    if ctx.attr("mode", "linear") == "circular":
        pos = ctx.g.mod(pos, past.dims[axis])
    else:
        pos = in_range(ctx.g, pos, past.dims[axis])
    return _scatter_along(ctx, past, ctx.g.expand(pos, update.dims), update, axis, "none")


def _scatter_along(ctx, data, idx, updates, axis: int, reduction: str):
    """Update element p goes to data position p with p[axis] replaced by ``idx[p]``
    (in range, see ``in_range``): its flat (row-major) position, so the scatter runs on the
    flattened data."""
    linear = None
    for i, n in enumerate(updates.dims):
        coord = idx if i == axis else ctx.g.constant(
            np.arange(n, dtype=np.int64).reshape([-1 if j == i else 1 for j in range(updates.rank)]))
        term = coord * math.prod(data.dims[i + 1:])
        linear = term if linear is None else linear + term
    size = math.prod(updates.dims)
    flat = ctx.g.reshape(data, [math.prod(data.dims)])
    out = scatter_rows(ctx, flat, ctx.g.reshape(ctx.g.expand(linear, updates.dims), [size]),
                       ctx.g.reshape(updates, [size]), reduction)
    return ctx.g.reshape(out, data.dims)


def scatter_rows(ctx, data, rows, updates, reduction: str):
    """``data [P, R...]`` with ``updates [M, R...]`` combined into rows ``rows [M]`` (i64,
    in range): ``none`` replaces (rows must be distinct, as ONNX requires), ``add`` adds
    (``scatter_add``), ``mul``/``max``/``min`` combine through an [M, P] one-hot."""
    g = ctx.g
    if reduction == "add":
        return g.scatter_add(data, rows, updates)
    if reduction == "none":
        hit = g.scatter_add(g.constant(np.zeros(data.dims[:1], bool)), rows,
                            g.constant(np.ones(rows.dims, bool)))
        cleared = g.where(g.reshape(hit, hit.dims + (1,) * (data.rank - 1)), g.constant(np.zeros((), data.dtype.np)),
                          data)
        return g.scatter_add(cleared, rows, updates)
    if reduction not in ("mul", "max", "min"):
        raise ctx.unsupported(f"reduction {reduction!r}")
    rest = (1,) * (data.rank - 1)
    hot = g.eq(g.reshape(rows, rows.dims + (1,) + rest),
               g.constant(np.arange(data.dims[0], dtype=np.int64).reshape((1, -1) + rest)))
    spread = g.reshape(updates, updates.dims[:1] + (1,) + updates.dims[1:])
    if reduction == "mul":
        return data * g.prod(g.where(hot, spread, g.constant(np.ones((), data.dtype.np))), axes=[0])
    info = np.finfo(data.dtype.np) if data.dtype.is_float else np.iinfo(data.dtype.np)
    neutral = g.constant(np.asarray(-np.inf if data.dtype.is_float else info.min, data.dtype.np) if reduction == "max"
                         else np.asarray(np.inf if data.dtype.is_float else info.max, data.dtype.np))
    picked = getattr(g, f"reduce_{reduction}")(g.where(hot, spread, neutral), axes=[0])
    combined = getattr(g, reduction)(data, picked)
    return g.where(g.reduce_max(hot, axes=[0]), combined, data)

"""Lowerings of the movement family (definitions: ``rlx_core.ir.ops.movement``).

Indices outside ``[-n, n)`` follow the index ops' device mode: clamped into
``[0, n - 1]`` after wrapping, for gathers and ``scatter_add`` alike (a host check
would cost a device sync).
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from rlx_core.ir import DType
from rlx_core.reference.movement import clamped_indices, pad_crop_and_width

from . import from_numpy, lowering, np_dtype


@lowering("reshape", low_float=True)
def reshape(x, *, dims):
    return mx.reshape(x, tuple(dims))


@lowering("transpose", low_float=True)
def transpose(x, *, perm):
    return mx.transpose(x, tuple(perm))


def _bound(start, stop, step):
    # Canonical attributes: stop -n-1 means "through index 0" (numpy's spelling for a
    # negative step); a slice object says it with None.
    return slice(start, None if step < 0 and stop < 0 else stop, step)


@lowering("slice", low_float=True)
def slice_(x, *, starts, stops, steps, axes):
    if 0 in x.shape:
        dims = [len(range(*slice(a, b, c).indices(n))) for a, b, c, n in zip(starts, stops, steps, x.shape)]
        return mx.zeros(dims, x.dtype)
    return x[tuple(_bound(*b) for b in zip(starts, stops, steps))]


@lowering("concat", low_float=True)
def concat(*xs, axis):
    return mx.concatenate(list(xs), axis=axis)


@lowering("split", low_float=True)
def split(x, *, sizes, axis):
    bounds = np.cumsum((0,) + tuple(sizes))
    index = [slice(None)] * x.ndim
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(lo), int(hi))
        parts.append(x[tuple(index)])
    return tuple(parts)


@lowering("expand", low_float=True)
def expand(x, *, dims):
    return mx.broadcast_to(x, tuple(dims))


def _host_indices(n: int, before: int, after: int, mode: str) -> mx.array:
    """The source index of each position of an axis of ``n`` padded by ``before``/``after``
    in numpy.pad's ``reflect`` or ``edge`` mode (computed on the host, at trace time)."""
    return mx.array(np.pad(np.arange(n, dtype=np.int32), (before, after), mode=mode))


@lowering("pad", low_float=True)
def pad(x, *, pads, mode, value):
    if x.ndim == 0:
        return x
    crop, width = pad_crop_and_width(x.shape, pads)  # crop the negative amounts, pad the positive ones
    x = x[crop]
    if not any(b or e for b, e in width):
        return x
    if mode == "constant":
        from rlx_core.reference.elementwise import cast_array
        dt = DType.of(np_dtype(x.dtype))
        fill = from_numpy(cast_array(np.asarray(value), dt))  # converted on the host, as the reference does
        if 0 in x.shape:
            return mx.full([n + b + e for n, (b, e) in zip(x.shape, width)], fill, x.dtype)
        return mx.pad(x, width, mode="constant", constant_values=fill)
    for axis, (b, e) in enumerate(width):
        if b or e:
            x = mx.take(x, _host_indices(x.shape[axis], b, e, mode), axis=axis)
    return x


def _wrapped(indices, n: int):
    """The index ops' device mode (``clamped_indices``), computed in i64, as i32."""
    return clamped_indices(indices.astype(mx.int64), n, mx).astype(mx.int32)


@lowering("gather", low_float=True)
def gather(table, indices, *, axis):
    if 0 in table.shape or 0 in indices.shape:
        dims = table.shape[:axis] + indices.shape + table.shape[axis + 1:]
        return mx.zeros(dims, table.dtype)
    return mx.take(table, _wrapped(indices, table.shape[axis]), axis=axis)


@lowering("gather_elements", low_float=True)
def gather_elements(x, indices, *, axis):
    if 0 in indices.shape:
        return mx.zeros(indices.shape, x.dtype)
    # indices may be shorter than x on the other axes: only that corner of x is read.
    corner = x[tuple(slice(0, d) if i != axis else slice(None) for i, d in enumerate(indices.shape))]
    return mx.take_along_axis(corner, _wrapped(indices, x.shape[axis]), axis=axis)


def _scatter_check(node, device):
    if device == "gpu" and node.outputs[0].dtype is DType.I64:
        return "scatter_add on i64: MLX's GPU scatter does not support int64"
    return None


@lowering("scatter_add", check=_scatter_check)
def scatter_add(data, indices, updates, *, axis):
    if 0 in updates.shape or 0 in data.shape:
        return data
    rows = _wrapped(indices, data.shape[axis])
    moved, moved_updates = mx.moveaxis(data, axis, 0), mx.moveaxis(updates, axis, 0)
    if data.dtype == mx.bool_:  # + on bool is logical or
        out = moved.at[rows].maximum(moved_updates)
    else:  # repeated indices accumulate
        out = moved.at[rows].add(moved_updates)
    return mx.moveaxis(out, 0, axis)

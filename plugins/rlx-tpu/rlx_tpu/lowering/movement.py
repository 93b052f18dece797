"""Lowerings of the movement family (definitions: ``rlx_core.ir.ops.movement``).

Indices outside ``[-n, n)`` follow the index ops' device mode: clamped into
``[0, n - 1]`` after wrapping, for gathers and ``scatter_add`` alike (XLA programs
cannot raise, and a host check would cost a device sync).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx_core.ir import DType
from rlx_core.reference.movement import clamped_indices, pad_crop_and_width
from rlx_core.reference.elementwise import cast_array

from . import lowering


@lowering("reshape", low_float=True)
def reshape(x, *, dims):
    return jnp.reshape(x, dims)


@lowering("transpose", low_float=True)
def transpose(x, *, perm):
    return jnp.transpose(x, perm)


@lowering("slice", low_float=True)
def slice_(x, *, starts, stops, steps, axes):
    # Canonical attributes: one (start, stop, step) per axis with numpy's meaning.
    return x[tuple(slice(*b) for b in zip(starts, stops, steps))]


@lowering("concat", low_float=True)
def concat(*xs, axis):
    return jnp.concatenate(xs, axis=axis)


@lowering("split", low_float=True)
def split(x, *, sizes, axis):
    bounds = np.cumsum((0,) + tuple(sizes))
    return tuple(lax.slice_in_dim(x, int(lo), int(hi), axis=axis) for lo, hi in zip(bounds[:-1], bounds[1:]))


@lowering("expand", low_float=True)
def expand(x, *, dims):
    return jnp.broadcast_to(x, dims)


@lowering("pad")
def pad(x, *, pads, mode, value):
    if x.ndim == 0:
        return x
    crop, width = pad_crop_and_width(x.shape, pads)  # crop the negative amounts, pad the positive ones
    cropped = x[crop]
    if mode == "constant":
        fill = cast_array(np.asarray(value), DType.of(np.dtype(x.dtype)))  # on the host, as the reference
        return jnp.pad(cropped, width, mode="constant", constant_values=fill)
    return jnp.pad(cropped, width, mode=mode)  # numpy's "reflect" and "edge" are the op's


def _wrapped(indices, n: int):
    """The index ops' device mode (``clamped_indices``), computed in i64."""
    return clamped_indices(indices.astype(np.int64), n, jnp)


@lowering("gather", low_float=True)
def gather(table, indices, *, axis):
    return jnp.take(table, _wrapped(indices, table.shape[axis]), axis=axis, mode="clip")


@lowering("gather_elements", low_float=True)
def gather_elements(x, indices, *, axis):
    # indices may be shorter than x on the other axes: only that corner of x is read.
    corner = x[tuple(slice(0, d) if i != axis else slice(None) for i, d in enumerate(indices.shape))]
    return jnp.take_along_axis(corner, _wrapped(indices, x.shape[axis]), axis=axis, mode="clip")


@lowering("scatter_add")
def scatter_add(data, indices, updates, *, axis):
    rows = _wrapped(indices, data.shape[axis])
    moved, moved_updates = jnp.moveaxis(data, axis, 0), jnp.moveaxis(updates, axis, 0)
    if data.dtype == np.bool_:  # + on bool is logical or
        out = moved.at[rows].max(moved_updates, mode="clip")
    else:  # repeated indices accumulate
        out = moved.at[rows].add(moved_updates, mode="clip")
    return jnp.moveaxis(out, 0, axis)

"""Reference kernels of the 'movement' family. Definitions are in ``rlx_core.ir.ops.movement``."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir.dtypes import DType
from .elementwise import cast_array
from .kernels import kernel


@kernel("reshape")
def reshape(x, *, dims):
    return np.reshape(x, dims)


@kernel("transpose")
def transpose(x, *, perm):
    return np.transpose(x, perm)


@kernel("slice")
def slice_(x, *, starts, stops, steps, axes):
    # Canonical attributes have one entry per axis, in axis order, with numpy's meaning.
    return x[tuple(slice(*b) for b in zip(starts, stops, steps))]


@kernel("concat")
def concat(*xs, axis):
    return np.concatenate(xs, axis=axis)


@kernel("split")
def split(x, *, sizes, axis):
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


@kernel("expand")
def expand(x, *, dims):
    return np.array(np.broadcast_to(x, dims))  # a real array, not a read-only broadcast view


def pad_crop_and_width(shape, pads) -> tuple[tuple[slice, ...], list[tuple[int, int]]]:
    """The pad op's ``pads`` (before and after amounts, interleaved per axis) split for
    ``shape``: the index that crops the negative amounts, then the (before, after) widths
    of the positive amounts to pad the cropped tensor with."""
    before, after = pads[0::2], pads[1::2]
    crop = tuple(slice(-min(b, 0), n + min(e, 0)) for n, b, e in zip(shape, before, after))
    return crop, [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]


@kernel("pad")
def pad(x, *, pads, mode, value):
    if x.ndim == 0:  # no axes, nothing to pad (np.pad refuses rank 0)
        return x
    crop, width = pad_crop_and_width(x.shape, pads)  # crop the negative amounts, pad the positive ones
    cropped = x[crop]
    if mode == "constant":
        fill = cast_array(np.asarray(value), DType.of(x.dtype))
        return np.pad(cropped, width, mode="constant", constant_values=fill)
    return np.pad(cropped, width, mode=mode)  # numpy's "reflect" and "edge" are the op's


def index_range_error(what: str, indices: np.ndarray, n: int, axis: int) -> "InputError | None":
    """The error for the first of ``indices`` outside ``[-n, n)`` (host mode of the index
    ops), naming the node as ``what`` (its label or ``Graph.describe``), or None when all
    are in range. Two reductions, no copy: cheap enough to run before every host gather."""
    if indices.size == 0 or (indices.min() >= -n and indices.max() < n):
        return None
    bad = indices[(indices < -n) | (indices >= n)].flat[0]
    return InputError(f"{what}: index {bad} is out of range for axis {axis} of size {n} "
                      f"(valid: {-n}..{n - 1})")


def wrapped_indices(node, indices: np.ndarray, n: int, axis: int) -> np.ndarray:
    """Negative indices + n, after checking every index lies in [-n, n) (``InputError``
    naming ``node`` otherwise: the host mode of the index ops)."""
    error = index_range_error(node.label, indices, n, axis)
    if error is not None:
        raise error
    return np.where(indices < 0, indices + n, indices).astype(np.int64)


def clamped_indices(indices, n: int, xp=np):
    """The device mode of the index ops (``rlx_core.ir.ops.movement``): negative indices
    + n, then clamped into ``[0, n - 1]``. ``xp`` is the array namespace (numpy,
    jax.numpy, mlx.core: each has ``where`` and ``clip``); ``n`` >= 1 (the ops refuse a
    non-empty index tensor into an empty axis)."""
    return xp.clip(xp.where(indices < 0, indices + n, indices), 0, n - 1)


@kernel("gather", context=True)
def gather(ctx, table, indices, *, axis):
    return np.take(table, wrapped_indices(ctx.node, indices, table.shape[axis], axis), axis=axis)


@kernel("gather_elements", context=True)
def gather_elements(ctx, x, indices, *, axis):
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = wrapped_indices(ctx.node, indices, x.shape[axis], axis)
    return x[tuple(where)]


@kernel("scatter_add", context=True)
def scatter_add(ctx, data, indices, updates, *, axis):
    out = data.copy()
    rows = wrapped_indices(ctx.node, indices, data.shape[axis], axis)
    # ufunc.at adds repeated indices once each, in order (a plain += would keep only the last).
    np.add.at(np.moveaxis(out, axis, 0), rows, np.moveaxis(updates, axis, 0))
    return out

"""Data movement: reshape, transpose, slice, concat, split, expand, pad, gather, scatter.

These kinds move elements without arithmetic (``scatter_add`` aside), so every kind
accepts every dtype. The index-taking kinds (``gather``, ``gather_elements``,
``scatter_add``) take i32 or i64 indices; a negative index ``i`` means ``i + n`` (``n`` =
size of the indexed axis), as in ONNX, so the valid indices are ``[-n, n)``. A
non-empty index tensor into an empty axis (n = 0) is refused when the node is built.
An index outside ``[-n, n)`` at run time is handled in one of two modes:

* host mode -- the reference interpreter and backends that see the indices on the host
  (rlx-cpu): ``InputError`` naming the node, the index and the axis size; the compiled
  graph stays usable.
* device mode -- backends where checking would cost a device synchronization (cuda,
  tpu, rocm, mlx, wgpu, metal): the wrapped index is clamped into ``[0, n - 1]``, i.e.
  ``min(max(i + n if i < 0 else i, 0), n - 1)`` (``rlx_core.reference.movement.
  clamped_indices``): a gather reads row 0 or row n-1, a ``scatter_add`` adds into it.
  Never an out-of-bounds access, a hang or a backend-specific answer.

The conformance suite (``ConformanceSuite.test_index_out_of_range``) accepts exactly
these two outcomes.

The helpers ``squeeze``, ``unsqueeze``, ``flatten`` and ``getitem`` (``x[1:, None, ..., 0]``)
lower to these kinds and add none of their own.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...errors import OpAttributeError, ShapeError
from ..dtypes import DType
from ..schema import Attr, expect_dtype, op, same_dtype
from ..shape import Shape, normalize_axes, normalize_axis

INDEX_DTYPES = frozenset({DType.I32, DType.I64})
PAD_MODES = ("constant", "reflect", "edge")


# --- reshape / transpose ---------------------------------------------------------------
@op("reshape", inputs="x", attrs={"dims": Attr("ints", doc="new dims; at most one -1 (inferred)")})
def reshape(a, x):
    """The same elements in row-major (C) order, with new ``dims``. One entry may be -1; the
    rule resolves it to the size that keeps the element count (ambiguous when the other dims
    hold no elements: then it is an error). The element counts must match."""
    a.dims = _resolve_reshape(a.dims, x)
    return x.with_dims(a.dims)


def _resolve_reshape(dims: tuple[int, ...], x: Shape) -> tuple[int, ...]:
    if sum(d == -1 for d in dims) > 1 or any(d < -1 for d in dims):
        raise ShapeError(f"reshape dims {list(dims)}: sizes must be >= 0, except one -1")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {list(x.dims)} ({x.size} elements) into {list(dims)}: "
                             f"no size for -1 fits")
        dims = tuple(x.size // known if d == -1 else d for d in dims)
    elif known != x.size:
        raise ShapeError(f"cannot reshape {list(x.dims)} ({x.size} elements) into {list(dims)} "
                         f"({known} elements)")
    return dims


@op("transpose", inputs="x", attrs={"perm": Attr("ints", None, "axis order; None = reversed", optional=True)})
def transpose(a, x):
    """numpy.transpose: output axis i is input axis ``perm[i]``. ``perm=None`` reverses the
    axes; negative entries count from the end. Canonicalized to an explicit permutation."""
    perm = tuple(reversed(range(x.rank))) if a.perm is None else tuple(
        normalize_axis(p, x.rank, "transpose perm entry") for p in a.perm)
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"transpose perm {list(a.perm)} is not a permutation of the {x.rank} axes "
                         f"of {list(x.dims)}")
    a.perm = perm
    return x.with_dims(x.dims[p] for p in perm)


# --- slice -----------------------------------------------------------------------------
@op("slice", inputs="x",
    attrs={"starts": Attr("ints", doc="first index per sliced axis"),
           "stops": Attr("ints", doc="end (exclusive) per sliced axis"),
           "steps": Attr("ints", None, "stride per sliced axis; None = all 1", optional=True),
           "axes": Attr("ints", None, "the sliced axes; None = the first len(starts)", optional=True)})
def slice_(a, x):
    """numpy basic slicing ``x[start:stop:step]`` along each of ``axes``; other axes are kept
    whole. Negative starts/stops count from the end, out-of-range values are clamped, steps
    may be negative (not 0) -- all exactly as Python and numpy define it.

    Canonical attributes (what backends see): one entry per axis (``axes = 0..rank-1``);
    ``start`` is the first index taken, so element ``i`` along an axis is
    ``x[start + i*step]`` for ``i`` below the output dim; ``stop`` is one step past the last
    index taken, or ``-n-1`` when that would be before index 0 (numpy's spelling of
    "through index 0"); an axis that keeps nothing is ``(0, 0, 1)``."""
    ranges = _sliced_ranges(a, x)
    bounds = [slice_bounds(r, n) for r, n in zip(ranges, x.dims)]
    a.starts, a.stops, a.steps = (tuple(b[i] for b in bounds) for i in range(3))
    a.axes = tuple(range(x.rank))
    return x.with_dims(len(r) for r in ranges)


def _sliced_ranges(a, x: Shape) -> list[range]:
    """The indices the slice attributes ``a`` keep along each axis of ``x`` (after checking them)."""
    n_given = len(a.starts)
    steps = (1,) * n_given if a.steps is None else a.steps
    axes = tuple(range(n_given)) if a.axes is None else a.axes
    if not n_given == len(a.stops) == len(steps) == len(axes):
        raise OpAttributeError(f"slice needs one start, stop, step and axis per sliced axis; got "
                               f"{len(a.starts)} starts, {len(a.stops)} stops, {len(steps)} steps, {len(axes)} axes")
    if n_given > x.rank:
        raise ShapeError(f"slice of {n_given} axes given for {list(x.dims)} of rank {x.rank}")
    if 0 in steps:
        raise OpAttributeError(f"slice steps must not be 0, got {list(steps)}")
    axes = [normalize_axis(ax, x.rank, "slice axis") for ax in axes]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"slice axes {list(a.axes)} repeat an axis")
    ranges = [range(n) for n in x.dims]
    for ax, start, stop, step in zip(axes, a.starts, a.stops, steps):
        ranges[ax] = range(*slice(start, stop, step).indices(x.dims[ax]))
    return ranges


def slice_bounds(taken: range, n: int) -> tuple[int, int, int]:
    """Canonical ``(start, stop, step)`` (see ``slice``) that takes the indices ``taken``
    from an axis of size ``n``."""
    if not taken:
        return 0, 0, 1
    stop = taken[-1] + taken.step
    return taken.start, (stop if stop >= 0 else -n - 1), taken.step


# --- concat / split / expand -------------------------------------------------------------
@op("concat", inputs="*xs", attrs={"axis": Attr("int", 0, "axis to join along")})
def concat(a, *xs):
    """numpy.concatenate: the inputs (at least one, equal dtypes and ranks >= 1) joined along
    ``axis``; all other dims must be equal."""
    if not xs:
        raise ShapeError("concat needs at least one input")
    dt = same_dtype("concat", *xs)
    first = xs[0]
    a.axis = normalize_axis(a.axis, first.rank, "concat axis")
    for x in xs[1:]:
        if x.rank != first.rank or any(d != e for i, (d, e) in enumerate(zip(x.dims, first.dims)) if i != a.axis):
            raise ShapeError(f"concat along axis {a.axis} needs equal dims elsewhere, got "
                             f"{[list(x.dims) for x in xs]}")
    size = sum(x.dims[a.axis] for x in xs)
    return Shape(first.dims[:a.axis] + (size,) + first.dims[a.axis + 1:], dt)


@op("split", inputs="x", multi_output=True,
    attrs={"sizes": Attr("ints", doc="size of each part along axis"), "axis": Attr("int", 0, "axis to cut")})
def split(a, x):
    """Cut ``x`` along ``axis`` into consecutive parts of the given ``sizes`` (one output per
    size, in order). The sizes (>= 0, at least one) must add up to the axis size."""
    a.axis = normalize_axis(a.axis, x.rank, "split axis")
    n = x.dims[a.axis]
    if not a.sizes or min(a.sizes) < 0 or sum(a.sizes) != n:
        raise ShapeError(f"split sizes {list(a.sizes)} must be >= 0 and add up to {n}, the size of "
                         f"axis {a.axis} of {list(x.dims)}")
    return tuple(x.with_dims(x.dims[:a.axis] + (s,) + x.dims[a.axis + 1:]) for s in a.sizes)


@op("expand", inputs="x", attrs={"dims": Attr("ints", doc="the dims to broadcast to")})
def expand(a, x):
    """numpy.broadcast_to(x, dims): the dims of ``x`` are aligned with the end of ``dims``;
    each must equal its counterpart or be 1 (repeated). ``dims`` may add leading axes."""
    if any(d < 0 for d in a.dims) or x.rank > len(a.dims) or any(
            xd not in (1, d) for xd, d in zip(reversed(x.dims), reversed(a.dims))):
        raise ShapeError(f"cannot expand {list(x.dims)} to {list(a.dims)} (numpy broadcast_to rules)")
    return x.with_dims(a.dims)


# --- pad -------------------------------------------------------------------------------
@op("pad", inputs="x",
    attrs={"pads": Attr("ints", doc="(before, after) per axis, flattened: b0, a0, b1, a1, ..."),
           "mode": Attr("str", "constant", "constant | reflect | edge"),
           "value": Attr("float", 0.0, "fill value of constant mode")})
def pad(a, x):
    """Grow (or crop) each axis: ``pads`` holds ``before, after`` for every axis in order.
    A negative amount removes that many elements from that side; cropping happens first,
    padding then extends the cropped tensor. Modes (numpy.pad's, ONNX Pad's):
    ``constant`` fills with ``value`` (converted to x's dtype as ``cast`` does);
    ``reflect`` mirrors without repeating the border (each pad <= cropped size - 1);
    ``edge`` repeats the border element (cropped size >= 1 when padding)."""
    if len(a.pads) != 2 * x.rank:
        raise ShapeError(f"pad needs (before, after) for each of the {x.rank} axes of {list(x.dims)}, "
                         f"got {len(a.pads)} numbers")
    if a.mode not in PAD_MODES:
        raise OpAttributeError(f"pad mode must be one of {', '.join(PAD_MODES)}, got {a.mode!r}")
    return x.with_dims(_padded_size(a.mode, ax, n, a.pads[2 * ax], a.pads[2 * ax + 1])
                       for ax, n in enumerate(x.dims))


def _padded_size(mode: str, axis: int, n: int, before: int, after: int) -> int:
    kept = n + min(before, 0) + min(after, 0)
    if kept < 0:
        raise ShapeError(f"pad ({before}, {after}) crops more than the {n} elements of axis {axis}")
    grow = max(before, 0), max(after, 0)
    if mode == "reflect" and max(grow) > kept - 1 and max(grow) > 0:
        raise ShapeError(f"reflect pad ({before}, {after}) of axis {axis} needs each pad <= {max(kept - 1, 0)} "
                         f"(the cropped size {kept} minus 1)")
    if mode == "edge" and kept == 0 and max(grow) > 0:
        raise ShapeError(f"edge pad of axis {axis} has no element to repeat (size {kept} after cropping)")
    return kept + sum(grow)


# --- gather / scatter ------------------------------------------------------------------
@op("gather", inputs=("table", "indices"), attrs={"axis": Attr("int", 0, "axis of table to index")})
def gather(a, table, indices):
    """numpy.take(table, indices, axis) / ONNX Gather: the ``axis`` of ``table`` is replaced
    by the dims of ``indices``: ``out[p, j, q] = table[p, indices[j], q]`` (p: the axes before,
    j: an index tuple of ``indices``, q: the axes after). Axis 0 is an embedding lookup.
    See the module docstring for negative and out-of-range indices."""
    expect_dtype("gather indices", indices, INDEX_DTYPES)
    a.axis = normalize_axis(a.axis, table.rank, "gather axis")
    _expect_indexable("gather", table, indices, a.axis)
    return table.with_dims(table.dims[:a.axis] + indices.dims + table.dims[a.axis + 1:])


@op("gather_elements", inputs=("x", "indices"), attrs={"axis": Attr("int", 0, "axis to index")})
def gather_elements(a, x, indices):
    """ONNX GatherElements / torch.gather / numpy.take_along_axis: output has the dims of
    ``indices``, and ``out[p] = x[p with p[axis] replaced by indices[p]]``. ``indices`` has
    x's rank and, on every other axis, a size no larger than x's. See the module docstring
    for negative and out-of-range indices."""
    expect_dtype("gather_elements indices", indices, INDEX_DTYPES)
    a.axis = normalize_axis(a.axis, x.rank, "gather_elements axis")
    _expect_indexable("gather_elements", x, indices, a.axis)
    if indices.rank != x.rank or any(i != a.axis and d > e for i, (d, e) in enumerate(zip(indices.dims, x.dims))):
        raise ShapeError(f"gather_elements indices {list(indices.dims)} must have the rank of x {list(x.dims)} "
                         f"and no larger size on any axis but {a.axis}")
    return x.with_dims(indices.dims)


@op("scatter_add", inputs=("data", "indices", "updates"), attrs={"axis": Attr("int", 0, "axis to add along")})
def scatter_add(a, data, indices, updates):
    """torch.index_add: a copy of ``data`` with ``updates[p, i, q]`` added to
    ``data[p, indices[i], q]`` along ``axis`` for each i in order; repeated indices
    accumulate. ``indices`` is 1-D; ``updates`` has data's dims except ``len(indices)`` on
    ``axis``. Integers wrap; for bool, + is logical or. See the module docstring for
    negative and out-of-range indices."""
    expect_dtype("scatter_add indices", indices, INDEX_DTYPES)
    same_dtype("scatter_add data and updates", data, updates)
    a.axis = normalize_axis(a.axis, data.rank, "scatter_add axis")
    if indices.rank != 1:
        raise ShapeError(f"scatter_add indices must be 1-D, got {list(indices.dims)}")
    _expect_indexable("scatter_add", data, indices, a.axis)
    want = data.dims[:a.axis] + indices.dims + data.dims[a.axis + 1:]
    if updates.dims != want:
        raise ShapeError(f"scatter_add updates must have dims {list(want)} (data {list(data.dims)} with "
                         f"axis {a.axis} of size len(indices)), got {list(updates.dims)}")
    return data


def _expect_indexable(kind: str, x: Shape, indices: Shape, axis: int) -> None:
    """Indices into an empty axis are all out of range, whatever their values: refused
    here, so that no backend has to invent a row to read."""
    if x.dims[axis] == 0 and indices.size:
        raise ShapeError(f"{kind} indexes axis {axis} of {list(x.dims)}, which is empty, with "
                         f"{indices.size} indices: every one would be out of range")


# --- builders --------------------------------------------------------------------------
class MovementBuilders:
    def reshape(self, x, dims, shape=None, *, name=None):
        """Reshape to ``dims`` (one may be -1)."""
        return self.add_node("reshape", (self.as_value(x),), {"dims": dims}, shape=shape, name=name)

    def transpose(self, x, perm=None, *, shape=None, name=None):
        """Permute axes (``perm=None`` reverses them, like ``x.T``)."""
        return self.add_node("transpose", (self.as_value(x),), {"perm": perm}, shape=shape, name=name)

    def slice(self, x, starts, stops, steps=None, axes=None, *, shape=None, name=None):
        """``x[starts:stops:steps]`` along ``axes`` (default: the first ``len(starts)`` axes)."""
        return self.add_node("slice", (self.as_value(x),),
                             {"starts": starts, "stops": stops, "steps": steps, "axes": axes}, shape=shape, name=name)

    def concat(self, xs, axis=0, shape=None, *, name=None):
        """Join ``xs`` along ``axis``."""
        return self.add_node("concat", [self.as_value(x) for x in xs], {"axis": axis}, shape=shape, name=name)

    def split(self, x, sizes, axis=0, *, shape=None, name=None):
        """Cut along ``axis`` into parts of ``sizes``; returns a tuple of Values."""
        return self.add_node("split", (self.as_value(x),), {"sizes": sizes, "axis": axis}, shape=shape, name=name)

    def expand(self, x, dims, *, shape=None, name=None):
        """Broadcast to ``dims`` (numpy.broadcast_to)."""
        return self.add_node("expand", (self.as_value(x),), {"dims": dims}, shape=shape, name=name)

    def pad(self, x, pads, mode="constant", value=0, *, shape=None, name=None):
        """Pad (or crop, with negative amounts) by ``pads = [(before, after), ...]``, one pair per axis."""
        return self.add_node("pad", (self.as_value(x),), {"pads": _flat_pads(pads), "mode": mode, "value": value},
                             shape=shape, name=name)

    def gather(self, table, idx, axis=0, shape=None, *, name=None):
        """numpy.take(table, idx, axis); axis 0 is an embedding lookup."""
        return self.add_node("gather", (self.as_value(table), self.as_value(idx)), {"axis": axis},
                             shape=shape, name=name)

    def gather_elements(self, x, idx, axis=0, *, shape=None, name=None):
        """numpy.take_along_axis / torch.gather."""
        return self.add_node("gather_elements", (self.as_value(x), self.as_value(idx)), {"axis": axis},
                             shape=shape, name=name)

    def scatter_add(self, data, idx, updates, axis=0, *, shape=None, name=None):
        """torch.index_add: ``data`` with ``updates`` added at ``idx`` along ``axis``."""
        return self.add_node("scatter_add", (self.as_value(data), self.as_value(idx), self.as_value(updates)),
                             {"axis": axis}, shape=shape, name=name)

    # --- helpers that lower to reshape / slice ----------------------------------------
    def squeeze(self, x, axes=None, *, name=None):
        """Remove size-1 axes (``axes=None``: all of them; given axes must have size 1)."""
        x = self.as_value(x)
        axes = (tuple(i for i, d in enumerate(x.dims) if d == 1) if axes is None
                else normalize_axes(axes, x.rank, "squeeze axes"))
        wide = [ax for ax in axes if x.dims[ax] != 1]
        if wide:
            raise ShapeError(f"squeeze axis {wide[0]} of {list(x.dims)} has size {x.dims[wide[0]]}, not 1")
        return self.reshape(x, [d for i, d in enumerate(x.dims) if i not in axes], name=name)

    def unsqueeze(self, x, axes, *, name=None):
        """Insert size-1 axes at ``axes``, positions in the output (like numpy.expand_dims)."""
        x = self.as_value(x)
        n_axes = 1 if isinstance(axes, int) else len(axes)
        new = normalize_axes(axes, x.rank + n_axes, "unsqueeze axes")
        rest = iter(x.dims)
        return self.reshape(x, [1 if i in new else next(rest) for i in range(x.rank + n_axes)], name=name)

    def flatten(self, x, start=0, end=-1, *, name=None):
        """Merge axes ``start..end`` (inclusive) into one, like torch.flatten (rank 0 -> [1])."""
        x = self.as_value(x)
        if x.rank == 0:
            return self.reshape(x, [1], name=name)
        s, e = normalize_axis(start, x.rank, "flatten start"), normalize_axis(end, x.rank, "flatten end")
        if s > e:
            raise ShapeError(f"flatten start {start} comes after end {end} for rank {x.rank}")
        return self.reshape(x, x.dims[:s] + (math.prod(x.dims[s:e + 1]),) + x.dims[e + 1:], name=name)

    def getitem(self, x, index):
        """numpy basic indexing (``x[i]``, ``x[a:b:c]``, ``x[None]``, ``x[..., 0]`` and tuples of
        them), lowered to one ``slice`` and one ``reshape`` (either left out when it would do
        nothing). Integers out of range are a ShapeError, as numpy raises IndexError."""
        x = self.as_value(x)
        taken, dims = basic_index(index, x.dims)
        out = x
        if any(r != range(n) for r, n in zip(taken, x.dims)):
            bounds = [slice_bounds(r, n) for r, n in zip(taken, x.dims)]
            out = self.slice(x, *(list(col) for col in zip(*bounds)))
        return out if out.dims == dims else self.reshape(out, dims)


def _flat_pads(pads) -> tuple[int, ...]:
    """``[(before, after), ...]`` -> ``(b0, a0, b1, a1, ...)``."""
    try:
        pairs = [tuple(p) for p in pads]
    except TypeError:
        raise OpAttributeError(f"pad takes pads as (before, after) pairs, one per axis, got {pads!r}") from None
    if any(len(p) != 2 for p in pairs):
        raise OpAttributeError(f"pad takes pads as (before, after) pairs, one per axis, got {pads!r}")
    return tuple(v for p in pairs for v in p)


def basic_index(index, dims: tuple[int, ...]) -> tuple[list[range], tuple[int, ...]]:
    """What numpy basic indexing takes from an array of ``dims``: the indices kept along
    each axis, and the result's dims (ints drop their axis, None adds one of size 1)."""
    items = index if isinstance(index, tuple) else (index,)
    n_ellipses = sum(item is Ellipsis for item in items)  # by identity: arrays make `in` ambiguous
    if n_ellipses > 1:
        raise OpAttributeError(f"an index can only have a single ellipsis ('...'), got {index!r}")
    consuming = sum(item is not None and item is not Ellipsis for item in items)
    if consuming > len(dims):
        raise ShapeError(f"too many indices: {consuming} for {list(dims)} of rank {len(dims)}")
    if not n_ellipses:
        items = items + (Ellipsis,)
    taken, out, axis = [], [], 0
    for item in items:
        if item is None:
            out.append(1)
        elif item is Ellipsis:
            for n in dims[axis:axis + len(dims) - consuming]:
                taken.append(range(n))
                out.append(n)
            axis += len(dims) - consuming
        else:
            r = _index_range(item, dims[axis], axis)
            taken.append(r)
            if isinstance(item, slice):
                out.append(len(r))
            axis += 1
    return taken, tuple(out)


def _index_range(item, n: int, axis: int) -> range:
    """The indices an int or a slice takes from an axis of size ``n``."""
    if isinstance(item, slice):
        try:
            return range(*item.indices(n))
        except (TypeError, ValueError) as e:
            raise OpAttributeError(f"bad slice {item!r} for axis {axis}: {e}") from None
    i = _as_int(item)
    if i is None:
        raise OpAttributeError(f"cannot index with {type(item).__name__} {item!r}: indexing takes ints, slices, "
                               f"None and '...'; use g.gather or g.gather_elements for tensor indices")
    if not -n <= i < n:
        raise ShapeError(f"index {i} is out of range for axis {axis} of size {n}")
    return range(i % n, i % n + 1)


def _as_int(item) -> int | None:
    """``item`` as a Python int if it is an integer (numpy's too, but not a bool), else None."""
    if isinstance(item, (bool, np.bool_)):
        return None
    try:
        return operator.index(item)
    except TypeError:
        return None

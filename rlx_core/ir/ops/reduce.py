"""Reductions and other ops that work along axes: sums and extrema, arg-extrema,
softmax, cumulative sums and top-k.

Every kind keeps its input's dtype (arg-extrema and top-k indices are i64). Integer
sums, products and cumulative sums wrap around like the dtype's two's-complement
arithmetic, exactly as the same loop in C would; 16-bit floats are accumulated in f32
and rounded once. Axes are canonicalized in the shape rule: ``axes=None`` becomes every
axis, negative axes become positive, and ``axes`` is sorted, so backends only ever see
explicit, sorted, non-negative axes.
"""
from __future__ import annotations

from ...errors import ShapeError
from ..dtypes import COMPLEX, FLOATS, INTS, NUMERIC, DType
from ..schema import Attr, op
from ..shape import Shape, normalize_axes, normalize_axis

ORDERED = FLOATS | INTS | frozenset({DType.BOOL})  # dtypes with a total order (nan aside)

# kind -> (builder name, accepted dtypes, definition, the value of an empty reduction or None)
REDUCTIONS: dict[str, tuple[str, frozenset, str, str | None]] = {
    "reduce_sum": ("sum", NUMERIC, "the sum of the elements (integers wrap on overflow)", "0"),
    "reduce_mean": ("mean", FLOATS | COMPLEX, "the sum divided by the number of elements", "nan"),
    "reduce_prod": ("prod", NUMERIC, "the product of the elements (integers wrap on overflow)", "1"),
    "reduce_max": ("reduce_max", ORDERED,
                   "the largest element; nan if any element is nan; for bool: any", None),
    "reduce_min": ("reduce_min", ORDERED,
                   "the smallest element; nan if any element is nan; for bool: all", None),
}
REDUCE_ATTRS = {
    "axes": Attr("ints", None, "axes to reduce; None = all axes, () = none", optional=True),
    "keepdims": Attr("bool", False, "keep reduced axes as size 1"),
}


def reduced_dims(dims: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    """``dims`` with ``axes`` removed, or set to 1 when ``keepdims``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(dims))
    return tuple(d for i, d in enumerate(dims) if i not in axes)


def _require_nonempty(kind: str, x: Shape, axes: tuple[int, ...]) -> None:
    """Extrema have no identity: reducing over an axis of size 0 is a build error."""
    empty = [ax for ax in axes if x.dims[ax] == 0]
    if empty:
        raise ShapeError(f"{kind} over axis {empty[0]} of size 0 (dims {list(x.dims)}) is undefined: "
                         f"there is no largest or smallest element of nothing")


def _declare_reduction(kind, builder, dtypes, doc, empty):
    def rule(a, x):
        a.axes = normalize_axes(a.axes, x.rank)
        if empty is None:
            _require_nonempty(kind, x, a.axes)
        return x.with_dims(reduced_dims(x.dims, a.axes, a.keepdims))
    on_empty = (f"An empty reduction gives {empty}." if empty is not None else
                "Reducing over an axis of size 0 is a ShapeError at build time.")
    rule.__doc__ = (f"{kind}(x) over ``axes``: {doc}. Output dtype = input dtype. ``axes=None`` "
                    f"reduces every axis (canonicalized to the explicit sorted list), ``axes=()`` reduces "
                    f"none. {on_empty}")
    op(kind, inputs="x", attrs=REDUCE_ATTRS, dtypes=dtypes, group="reduce", builder=builder)(rule)


for _k, _spec in REDUCTIONS.items():
    _declare_reduction(_k, *_spec)


ARG_ATTRS = {"axis": Attr("int", -1, "axis to search"), "keepdims": Attr("bool", False, "keep it as size 1")}


def _arg_shape(kind, a, x):
    a.axis = normalize_axis(a.axis, x.rank)
    _require_nonempty(kind, x, (a.axis,))
    return Shape(reduced_dims(x.dims, (a.axis,), a.keepdims), DType.I64)


@op("argmax", inputs="x", attrs=ARG_ATTRS, dtypes=ORDERED)
def argmax(a, x):
    """Index (i64) of the largest element along ``axis``. Ties give the lowest index. A nan
    counts as larger than everything, so any nan gives the index of the first nan (numpy and
    torch semantics). An axis of size 0 is a ShapeError."""
    return _arg_shape("argmax", a, x)


@op("argmin", inputs="x", attrs=ARG_ATTRS, dtypes=ORDERED)
def argmin(a, x):
    """Index (i64) of the smallest element along ``axis``. Ties give the lowest index. As in
    numpy and torch, nan propagates: any nan gives the index of the first nan. An axis of
    size 0 is a ShapeError."""
    return _arg_shape("argmin", a, x)


@op("softmax", inputs="x", attrs={"axis": Attr("int", -1, "axis to normalize")}, dtypes=FLOATS)
def softmax(a, x):
    """softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m) along ``axis``, m = max_j x_j (the
    stable form: no overflow for large inputs). A slice whose max is infinite, or that holds
    a nan, gives nan (as torch does)."""
    a.axis = normalize_axis(a.axis, x.rank)
    return x


@op("log_softmax", inputs="x", attrs={"axis": Attr("int", -1, "axis to normalize")}, dtypes=FLOATS)
def log_softmax(a, x):
    """log_softmax(x)_i = x_i - m - log(sum_j exp(x_j - m)) along ``axis``, m = max_j x_j:
    accurate where softmax underflows to 0. A slice whose max is infinite, or that holds a
    nan, gives nan."""
    a.axis = normalize_axis(a.axis, x.rank)
    return x


@op("cumsum", inputs="x", dtypes=NUMERIC,
    attrs={"axis": Attr("int", doc="axis to scan"),
           "exclusive": Attr("bool", False, "leave out the element itself (the first output is 0)"),
           "reverse": Attr("bool", False, "sum from the end of the axis towards its start")})
def cumsum(a, x):
    """Running sum along ``axis`` (ONNX CumSum): out_i = sum_{j <= i} x_j. ``exclusive`` sums
    j < i (so out_0 = 0); ``reverse`` sums j >= i (j > i when also exclusive). Integers wrap;
    16-bit floats accumulate in f32."""
    a.axis = normalize_axis(a.axis, x.rank)
    return x


@op("topk", inputs="x", dtypes=ORDERED, multi_output=True,
    attrs={"k": Attr("int", doc="how many elements to keep"),
           "axis": Attr("int", -1, "axis to search"),
           "largest": Attr("bool", True, "keep the largest (else the smallest) elements"),
           "sorted": Attr("bool", True, "order the kept elements best first (else by index)")})
def topk(a, x):
    """The ``k`` largest (``largest=False``: smallest) elements along ``axis`` -> (values, indices
    i64), both with ``dims[axis] = k``. ``sorted=True`` orders them best first; ``sorted=False``
    keeps them in increasing index order. Equal values: the lower index is taken first and comes
    first. nan counts as larger than every number (so it is picked first by ``largest`` and last
    otherwise). ``0 <= k <= dims[axis]``, else a ShapeError."""
    a.axis = normalize_axis(a.axis, x.rank)
    n = x.dims[a.axis]
    if not 0 <= a.k <= n:
        raise ShapeError(f"topk k={a.k} must be in 0..{n} (the size of axis {a.axis} of {list(x.dims)})")
    dims = x.dims[:a.axis] + (a.k,) + x.dims[a.axis + 1:]
    return x.with_dims(dims), Shape(dims, DType.I64)


def _axes_attr(axes):
    """Builders accept one int as well as a sequence of axes."""
    return (axes,) if isinstance(axes, int) else axes


class ReduceBuilders:
    def _reduce(self, kind, x, axes, keepdims, shape, name):
        return self.add_node(kind, (self.as_value(x),), {"axes": _axes_attr(axes), "keepdims": keepdims},
                             shape=shape, name=name)

    def sum(self, x, axes=None, keepdims=False, *, shape=None, name=None):
        """Sum over ``axes`` (None = all). See ``reduce_sum``."""
        return self._reduce("reduce_sum", x, axes, keepdims, shape, name)

    def mean(self, x, axes=None, keepdims=False, *, shape=None, name=None):
        """Mean over ``axes`` (None = all); floats and complex. See ``reduce_mean``."""
        return self._reduce("reduce_mean", x, axes, keepdims, shape, name)

    def prod(self, x, axes=None, keepdims=False, *, shape=None, name=None):
        """Product over ``axes`` (None = all). See ``reduce_prod``."""
        return self._reduce("reduce_prod", x, axes, keepdims, shape, name)

    def reduce_max(self, x, axes=None, keepdims=False, *, shape=None, name=None):
        """Largest element over ``axes``. (``g.max`` is the elementwise maximum of two tensors.)"""
        return self._reduce("reduce_max", x, axes, keepdims, shape, name)

    def reduce_min(self, x, axes=None, keepdims=False, *, shape=None, name=None):
        """Smallest element over ``axes``. (``g.min`` is the elementwise minimum of two tensors.)"""
        return self._reduce("reduce_min", x, axes, keepdims, shape, name)

    def argmax(self, x, axis=-1, keepdims=False, *, shape=None, name=None):
        """i64 index of the first largest element along ``axis``."""
        return self.add_node("argmax", (self.as_value(x),), {"axis": axis, "keepdims": keepdims},
                             shape=shape, name=name)

    def argmin(self, x, axis=-1, keepdims=False, *, shape=None, name=None):
        """i64 index of the first smallest element along ``axis``."""
        return self.add_node("argmin", (self.as_value(x),), {"axis": axis, "keepdims": keepdims},
                             shape=shape, name=name)

    def softmax(self, x, axis=-1, shape=None, *, name=None):
        """Softmax along ``axis`` (the seed's ``softmax(x, axis, shape)`` form works too)."""
        return self.add_node("softmax", (self.as_value(x),), {"axis": axis}, shape=shape, name=name)

    def log_softmax(self, x, axis=-1, shape=None, *, name=None):
        """log(softmax(x)) along ``axis``, computed without underflow."""
        return self.add_node("log_softmax", (self.as_value(x),), {"axis": axis}, shape=shape, name=name)

    def cumsum(self, x, axis, exclusive=False, reverse=False, shape=None, *, name=None):
        """Running sum along ``axis`` (ONNX CumSum's ``exclusive`` / ``reverse``)."""
        return self.add_node("cumsum", (self.as_value(x),),
                             {"axis": axis, "exclusive": exclusive, "reverse": reverse}, shape=shape, name=name)

    def topk(self, x, k, axis=-1, largest=True, sorted=True, *, shape=None, name=None):
        """(values, indices) of the ``k`` largest (or smallest) elements along ``axis``."""
        return self.add_node("topk", (self.as_value(x),),
                             {"k": k, "axis": axis, "largest": largest, "sorted": sorted}, shape=shape, name=name)

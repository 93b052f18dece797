"""Source ops: values that enter the graph from outside (inputs, params) or are literal."""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..dtypes import DType, NUMERIC
from ..schema import Attr, op
from ..shape import Shape


@op("input", attrs={"name": Attr("str"), "dims": Attr("ints"), "dtype": Attr("dtype")})
def input_(a):
    """A tensor fed at every run under ``name`` (``compiled.run({name: array})``)."""
    return Shape(a.dims, a.dtype)


@op("param", attrs={"name": Attr("str"), "dims": Attr("ints"), "dtype": Attr("dtype")})
def param(a):
    """A weight set once with ``compiled.set_param(name, array)`` and kept by the backend."""
    return Shape(a.dims, a.dtype)


@op("constant", attrs={"value": Attr("array", doc="the literal tensor; its dtype is the node's")})
def constant(a):
    """A literal tensor embedded in the graph."""
    return Shape(a.value.shape, DType.of(a.value.dtype))


@op("arange", attrs={"start": Attr("float", 0.0), "step": Attr("float", 1.0), "length": Attr("int"),
                     "dtype": Attr("dtype", DType.I32)})
def arange(a):
    """``[start, start + step, ..., start + (length-1)*step]`` as a 1-D tensor of ``dtype``."""
    if a.length < 0:
        raise ShapeError(f"arange length must be >= 0, got {a.length}")
    if a.dtype not in NUMERIC or a.dtype.is_complex:
        raise ShapeError(f"arange dtype must be a real number type, got {a.dtype}")
    return Shape((a.length,), a.dtype)


class SourceBuilders:
    def input(self, name: str, shape, dtype="f32", *, label: str | None = None):
        """Declare a runtime input. ``shape`` is a Shape or a dims sequence (then ``dtype``)."""
        dims, dt = _dims_dtype(shape, dtype)
        return self.add_node("input", (), {"name": name, "dims": dims, "dtype": dt}, name=label or name)

    def param(self, name: str, shape, dtype="f32", *, label: str | None = None):
        """Declare a parameter (weight): set with ``set_param`` and kept between runs."""
        dims, dt = _dims_dtype(shape, dtype)
        return self.add_node("param", (), {"name": name, "dims": dims, "dtype": dt}, name=label or name)

    def constant(self, value, dtype=None, *, name: str | None = None):
        """A literal tensor (numpy array, nested list or scalar), optionally cast to ``dtype``."""
        arr = np.asarray(value)
        if dtype is not None:
            arr = arr.astype(DType.of(dtype).np)
        DType.of(arr.dtype)  # rejects dtypes RLX does not have (e.g. float128, strings)
        return self.add_node("constant", (), {"value": arr}, name=name)

    def arange(self, length: int, start: float = 0.0, step: float = 1.0, dtype="i32", *, name=None):
        return self.add_node("arange", (), {"start": start, "step": step, "length": length,
                                            "dtype": dtype}, name=name)


def _dims_dtype(shape, dtype):
    if isinstance(shape, Shape):
        return shape.dims, shape.dtype
    return tuple(shape), DType.of(dtype)

"""Tensor types: static dimensions plus an element dtype, and the shared shape algebra.

RLX graphs are statically shaped: every value's dims are known when its node is
added, which is what lets backends plan memory once at compile time. A model with a
varying batch or sequence length is built (and cached) once per shape.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import ArgumentTypeError, ShapeError
from .dtypes import DType

__all__ = ["Shape", "broadcast_dims", "normalize_axis", "normalize_axes"]


@dataclass(frozen=True)
class Shape:
    """Dims and dtype of one tensor. ``Shape((2, 3), "f32")``; rank 0 is ``Shape((), dt)``."""

    dims: tuple[int, ...]
    dtype: DType

    def __init__(self, dims: Iterable[int], dtype: "DType | str" = DType.F32):
        if isinstance(dims, (str, bytes)) or not isinstance(dims, Iterable):
            raise ArgumentTypeError(f"Shape(dims=...) takes a sequence of integers such as (2, 3), "
                                    f"got {type(dims).__name__} {dims!r}")
        dims = tuple(dims)
        for d in dims:
            if isinstance(d, bool) or not hasattr(d, "__index__"):
                raise ShapeError(f"dimension {d!r} in {dims} is not an integer")
            if operator.index(d) < 0:
                raise ShapeError(f"dimension {d} in {dims} is negative")
        object.__setattr__(self, "dims", tuple(operator.index(d) for d in dims))
        object.__setattr__(self, "dtype", DType.of(dtype))

    @classmethod
    def scalar(cls, dtype: "DType | str" = DType.F32) -> "Shape":
        return cls((), dtype)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def with_dims(self, dims: Iterable[int]) -> "Shape":
        return Shape(dims, self.dtype)

    def with_dtype(self, dtype: "DType | str") -> "Shape":
        return Shape(self.dims, dtype)

    def __repr__(self) -> str:
        return f"Shape({list(self.dims)}, {self.dtype.value})"

    __str__ = __repr__


def broadcast_dims(*shapes: Sequence[int], what: str = "operands") -> tuple[int, ...]:
    """Numpy's two-way (trailing-aligned) broadcast of several dim tuples."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        size = 1
        for s in shapes:
            j = i - (rank - len(s))
            if j < 0 or s[j] == 1:
                continue
            if size not in (1, s[j]):
                raise ShapeError(
                    f"cannot broadcast {what} with dims {[list(s) for s in shapes]}: "
                    f"axis {i - rank} has sizes {size} and {s[j]}")
            size = s[j]
        out.append(size)
    return tuple(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into ``range(rank)``, or raise a ShapeError."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ShapeError(f"{what} must be an integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axes: "Iterable[int] | int | None", rank: int, what: str = "axes") -> tuple[int, ...]:
    """Normalize an axis list (None means every axis); duplicates are an error."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    out = tuple(normalize_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {tuple(axes)} repeat an axis")
    return tuple(sorted(out))

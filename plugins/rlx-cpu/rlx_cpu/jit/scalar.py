"""Scalar helpers that generated kernels call where numpy's semantics need more than
one operator (all inlined by numba, so they cost nothing in a kernel's loop)."""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

__all__ = ["maximum", "minimum", "trunc_div", "typed"]


@njit(inline="always")
def maximum(a, b):
    """np.maximum: NaN if either is NaN (for integers simply the larger)."""
    return a if (a >= b or a != a) else b


@njit(inline="always")
def minimum(a, b):
    """np.minimum: NaN if either is NaN."""
    return a if (a <= b or a != a) else b


@njit(inline="always")
def trunc_div(a, b):
    """Integer division rounding toward zero (C / ONNX), as the ``div`` op defines it:
    the floor quotient, moved up by one where it was rounded down (computed in int64,
    which holds every RLX integer dtype; ``abs`` would overflow on -128 in int8)."""
    a, b = np.int64(a), np.int64(b)
    q = a // b
    return q + 1 if (q < 0 and q * b != a) else q


def typed(value, dtype):
    """``value`` as a scalar of ``dtype`` (an array's ``.dtype``): keeps float32 kernels
    in float32 where a literal such as ``-np.inf`` would be float64."""
    return dtype.type(value)


@overload(typed, inline="always")
def _typed(value, dtype):
    if isinstance(dtype, types.DType):
        scalar = dtype.dtype
        return lambda value, dtype: scalar(value)
    return None

"""Reference kernels of source ops (input and param are bound by the interpreter)."""
import numpy as np

from .kernels import kernel


@kernel("constant")
def constant(*, value):
    return value


@kernel("arange")
def arange(*, start, step, length, dtype):
    # Computed in f64 then cast, so integer dtypes get exact values.
    return (start + step * np.arange(length, dtype=np.float64)).astype(dtype.np)

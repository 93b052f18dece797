"""matmul on BLAS (numpy's OpenBLAS, which threads over the cores by itself)."""
from __future__ import annotations

import numpy as np

from . import Bound, Call, kernel

__all__ = ["matmul_calls"]


def matmul_calls(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> list[Call] | None:
    """``out = a @ b`` for 32/64-bit floats and complex numbers (None otherwise: integers
    accumulate exactly and 16-bit floats round once, which BLAS does not do).

    When ``b`` is a matrix, the batch dims of ``a`` are folded into its rows (as views),
    so that a ``[batch, seq, d] @ [d, n]`` projection is one GEMM, not ``batch`` of them.
    """
    if a.dtype != b.dtype or a.dtype.kind not in "fc" or a.dtype.itemsize < 4:
        return None
    if a.ndim > 2 and b.ndim == 2:
        try:
            rows = np.reshape(a, (-1, a.shape[-1]), copy=False)
            return [Call(np.matmul, (rows, b), {"out": np.reshape(out, (-1, out.shape[-1]), copy=False)})]
        except ValueError:  # a's batch dims are not evenly strided: one GEMM per batch entry
            pass
    return [Call(np.matmul, (a, b), {"out": out})]


@kernel("matmul")
def matmul_step(b: Bound):
    return matmul_calls(b.ins[0], b.ins[1], b.outs[0])

"""matmul on BLAS (numpy's OpenBLAS, which threads over the cores by itself)."""
from __future__ import annotations

import numpy as np

from . import Bound, Call, kernel

__all__ = ["matmul_calls", "multiply_adds", "OPENBLAS_SINGLE_THREADED"]

# OpenBLAS runs a GEMM of at most this many multiply-adds (M*N*K) on one thread anyway
# (interface/gemm.c: 65536 * GEMM_MULTITHREAD_THRESHOLD, which defaults to 4).
OPENBLAS_SINGLE_THREADED = 65536 * 4


def multiply_adds(a: np.ndarray, b: np.ndarray) -> int:
    """M*N*K of one matrix product of ``a @ b`` (batch dims aside)."""
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    return m * n * a.shape[-1]


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
            a, out = np.reshape(a, (-1, a.shape[-1]), copy=False), np.reshape(out, (-1, out.shape[-1]), copy=False)
        except ValueError:  # a's batch dims are not evenly strided: one GEMM per batch entry
            pass
    if a.ndim == 2 and b.ndim == 2 and out.flags.c_contiguous and out.dtype == a.dtype \
            and multiply_adds(a, b) <= OPENBLAS_SINGLE_THREADED:
        # the same BLAS call as np.matmul's, with less of numpy's dispatch around it:
        # 0.4 of 1.3 us for [1, 128] @ [128, 128] (a recurrent step, a loop body)
        return [Call(np.dot, (a, b), {"out": out})]
    return [Call(np.matmul, (a, b), {"out": out})]


@kernel("matmul")
def matmul_step(b: Bound):
    return matmul_calls(b.ins[0], b.ins[1], b.outs[0])

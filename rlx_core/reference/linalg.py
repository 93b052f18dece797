"""Reference kernels of the 'linalg' family. Definitions are in ``rlx_core.ir.ops.linalg``."""
from __future__ import annotations

import numpy as np

from ..ir.ops.linalg import solve_rhs_is_vector
from .kernels import kernel


@kernel("matmul")
def matmul(a, b):
    if a.dtype.kind in "iu":
        # Exact modular arithmetic: int64 products and sums wrap modulo 2**64, which is
        # exact modulo 2**bits for every narrower dtype; the final cast wraps to it.
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(a.dtype)
    return np.matmul(a, b)


@kernel("dense_solve")
def dense_solve(a, b):
    vector = solve_rhs_is_vector(a.shape, b.shape)
    rhs = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    rhs = np.broadcast_to(rhs, batch + rhs.shape[-2:])
    try:
        x = np.linalg.solve(a, rhs)
    except np.linalg.LinAlgError:  # some system is singular: solve one by one
        x = np.stack([_solve_or_nan(m, r) for m, r in zip(a.reshape((-1,) + a.shape[-2:]),
                                                           rhs.reshape((-1,) + rhs.shape[-2:]))])
        x = x.reshape(rhs.shape)
    return (x[..., 0] if vector else x).astype(a.dtype)


def _solve_or_nan(a, b):
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.full(b.shape, np.nan, dtype=np.result_type(a, b))

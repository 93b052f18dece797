"""Lowerings of the linalg family (definitions: ``rlx_core.ir.ops.linalg``).

* Float matmuls run on MLX's GEMM; 16-bit operands are contracted as they are, with
  f32 accumulation and one rounding (MLX's 16-bit GEMMs accumulate in f32 on every
  device), which is the f32 product of the widened operands rounded once.
* MLX multiplies only floating types: integer matmuls are composed (products and sums
  in i64, which wrap modulo 2**64 and so are exact modulo 2**bits of every narrower
  dtype, then cast back), as the reference defines them.
* ``dense_solve`` runs on MLX's CPU stream (MLX's LAPACK path; it has no GPU solve),
  for f32/f64 systems; complex systems are not claimed (MLX solves real ones only).
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from rlx_core.ir import DType
from rlx_core.ir.ops.linalg import solve_rhs_is_vector

from . import lowering


def _int_matmul(a, b):
    dtype = a.dtype
    if a.shape[-1] == 0:  # no terms: zeros, without an empty reduction (see reduce.py)
        return mx.zeros(np.matmul(np.empty(a.shape, np.int8), np.empty(b.shape, np.int8)).shape, dtype)
    a, b = a.astype(mx.int64), b.astype(mx.int64)
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    if vec_a:
        a = a[None, :]
    if vec_b:
        b = b[:, None]
    out = mx.sum(mx.expand_dims(a, -1) * mx.expand_dims(b, -3), axis=-2)
    if vec_a:
        out = out[..., 0, :]
    if vec_b:
        out = out[..., 0]
    return out.astype(dtype)


@lowering("matmul", low_float=True)
def matmul(a, b):
    if mx.issubdtype(a.dtype, mx.integer):
        return _int_matmul(a, b)
    return mx.matmul(a, b)


@lowering("dense_solve", exclude={DType.C64, DType.C128})
def dense_solve(a, b):
    vector = solve_rhs_is_vector(a.shape, b.shape)
    rhs = b[..., None] if vector else b
    batch = tuple(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(rhs.shape[:-2])))
    a = mx.broadcast_to(a, batch + a.shape[-2:])
    rhs = mx.broadcast_to(rhs, batch + rhs.shape[-2:])
    if 0 in a.shape or 0 in rhs.shape:
        x = mx.zeros(rhs.shape, a.dtype)
    else:
        x = mx.linalg.solve(a, rhs, stream=mx.cpu)
    return x[..., 0] if vector else x

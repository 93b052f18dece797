"""Lowerings of the linalg family (definitions: ``rlx_core.ir.ops.linalg``)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from rlx_core.ir.ops.linalg import solve_rhs_is_vector

from . import is_low_float, lowering


def contraction(dtype) -> dict:
    """Keyword arguments for contracting operands of ``dtype`` as RLX defines it.

    16-bit floats accumulate in f32 (``preferred_element_type``): their products are
    exact in f32, so this is the f32 product of the widened operands, rounded once
    afterwards. f32 and wider run at full precision -- XLA's default would let TPUs
    multiply f32 in bf16 passes and GPUs in TF32. Integers are exact modulo 2**bits in
    any accumulation width, so they need nothing.
    """
    if is_low_float(dtype):
        return {"preferred_element_type": np.float32}
    if jnp.issubdtype(dtype, jnp.inexact):
        return {"precision": lax.Precision.HIGHEST}
    return {}


@lowering("matmul", low_float=True)
def matmul(a, b):
    return jnp.matmul(a, b, **contraction(a.dtype))


@lowering("dense_solve")
def dense_solve(a, b):
    vector = solve_rhs_is_vector(a.shape, b.shape)
    rhs = b[..., None] if vector else b
    batch = jnp.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    x = jnp.linalg.solve(jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(rhs, batch + rhs.shape[-2:]))
    return x[..., 0] if vector else x

"""Lowerings of the elementwise family (definitions: ``rlx_core.ir.ops.elementwise``)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import lowering


def _gelu(x):
    return 0.5 * x * (1 + lax.erf(x / np.sqrt(2).astype(x.dtype)))


def _gelu_tanh(x):
    c = np.sqrt(2 / np.pi).astype(x.dtype)
    return 0.5 * x * (1 + jnp.tanh(c * (x + 0.044715 * x ** 3)))


def _softplus(x):
    # Overflow-free, as the reference computes it.
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


UNARY = {
    "neg": jnp.negative,
    "abs": jnp.abs,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt,
    "reciprocal": lambda x: 1 / x,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "atan": jnp.arctan,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": lambda x: jnp.maximum(x, 0),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * jax.nn.sigmoid(x),
    "softplus": _softplus,
    "erf": lax.erf,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "round": jnp.round,  # half to even, as numpy
    "sign": jnp.sign,
    "logical_not": jnp.logical_not,
}


def _div(a, b):
    # lax.div truncates integers toward zero (C / ONNX), as the op defines.
    return lax.div(*jnp.broadcast_arrays(a, b)) if jnp.issubdtype(a.dtype, jnp.integer) else a / b


def _mod(a, b, fmod=False):
    return jnp.fmod(a, b) if fmod else jnp.remainder(a, b)


BINARY = {
    "add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": _div, "pow": jnp.power,
    "max": jnp.maximum, "min": jnp.minimum, "mod": _mod, "atan2": jnp.arctan2,
    "logical_and": jnp.logical_and, "logical_or": jnp.logical_or, "logical_xor": jnp.logical_xor,
    "eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal,
    "gt": jnp.greater, "ge": jnp.greater_equal,
}

for _kind, _fn in {**UNARY, **BINARY}.items():
    lowering(_kind)(_fn)


@lowering("where")
def where(c, a, b):
    return jnp.where(c, a, b)


def cast_array(x, to):
    """Convert ``x`` to DType ``to`` as the ``cast`` op defines it (see ``cast_array`` of
    the reference): complex to real keeps the real part, float to int truncates, to bool
    is ``!= 0``."""
    if jnp.iscomplexobj(x) and not to.is_complex:
        x = jnp.real(x)
    if to.is_bool:
        return x != 0
    if jnp.issubdtype(x.dtype, jnp.floating) and to.is_int:
        x = jnp.trunc(x)
    return lax.convert_element_type(x, to.np)


@lowering("cast", low_float=True)
def cast(x, *, to):
    # 16-bit inputs convert directly: widening them to f32 first is exact, so it gives
    # the same numbers the reference gets.
    return cast_array(x, to)

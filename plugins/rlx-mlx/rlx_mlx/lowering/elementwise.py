"""Lowerings of the elementwise family (definitions: ``rlx_core.ir.ops.elementwise``).

Integer ``div`` and ``mod`` guard their divisors: a zero divisor gives 0 as numpy does
(the reference), and ``i32.min / -1`` wraps instead of trapping -- MLX's CPU kernels
divide with the machine's instruction, which faults on both.
"""
from __future__ import annotations

import math

import mlx.core as mx

from rlx_core.ir import DType

from . import lowering

_SQRT_HALF = 1 / math.sqrt(2)


def exp(x):
    """``e**x``. MLX's float64 ``exp`` has f32 accuracy (its SIMD approximation), its float64
    ``power`` is correctly rounded up to the error of ``e`` itself (1e-14 relative at
    |x| = 700): f64 exponentials go through ``power``."""
    if x.dtype == mx.float64:
        return mx.power(mx.array(math.e, mx.float64), x)
    return mx.exp(x)


def _gelu(x):
    return 0.5 * x * (1 + mx.erf(x * mx.array(_SQRT_HALF, x.dtype)))


def _gelu_tanh(x):
    c = mx.array(math.sqrt(2 / math.pi), x.dtype)
    return 0.5 * x * (1 + mx.tanh(c * (x + 0.044715 * x ** 3)))


def _sigmoid(x):
    # Branch-free and overflow-free, as the reference computes it: exp of -|x| only.
    e = exp(-mx.abs(x))
    return mx.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
    return mx.maximum(x, 0) + mx.log1p(exp(-mx.abs(x)))


UNARY = {
    "neg": mx.negative,
    "exp": exp,
    "log": mx.log,
    "sqrt": mx.sqrt,
    "rsqrt": lambda x: 1 / mx.sqrt(x),
    "reciprocal": lambda x: 1 / x,
    "sin": mx.sin,
    "cos": mx.cos,
    "tan": mx.tan,
    "atan": mx.arctan,
    "tanh": mx.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: mx.maximum(x, mx.array(0, x.dtype)),
    "gelu": _gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x * _sigmoid(x),
    "softplus": _softplus,
    "erf": mx.erf,
    "floor": mx.floor,
    "ceil": mx.ceil,
    "round": mx.round,  # half to even, as numpy
    "sign": lambda x: mx.where(mx.isnan(x), x, mx.sign(x)) if mx.issubdtype(x.dtype, mx.floating) else mx.sign(x),
    "logical_not": mx.logical_not,
}


def _is_int(a) -> bool:
    return mx.issubdtype(a.dtype, mx.integer)


def _safe_divisor(b, *bad):
    """``b`` with the values in ``bad`` replaced by 1, and where they were."""
    hit = None
    for v in bad:
        h = b == v
        hit = h if hit is None else mx.logical_or(hit, h)
    return mx.where(hit, mx.array(1, b.dtype), b), hit


def _div(a, b):
    if not _is_int(a):
        return a / b
    a, b = mx.broadcast_arrays(a, b)
    zero = mx.array(0, a.dtype)
    signed = mx.issubdtype(a.dtype, mx.signedinteger)
    safe, special = _safe_divisor(b, 0, -1) if signed else _safe_divisor(b, 0)
    q = mx.floor_divide(a, safe)
    if signed:  # floor -> truncation toward zero: one up where the signs differ and it is inexact
        inexact = mx.logical_and(mx.remainder(a, safe) != zero, (a < zero) != (safe < zero))
        q = q + inexact.astype(a.dtype)
        # b == -1: -a (wrapping at the minimum, as numpy); b == 0: 0
        return mx.where(special, mx.where(b == zero, zero, mx.negative(a)), q)
    return mx.where(special, zero, q)


def _mod(a, b, fmod=False):
    if _is_int(a):
        a, b = mx.broadcast_arrays(a, b)
        zero = mx.array(0, a.dtype)
        safe, by_zero = _safe_divisor(b, 0)
        r = mx.remainder(a, safe)  # floor modulo: the divisor's sign
        if fmod and mx.issubdtype(a.dtype, mx.signedinteger):  # the dividend's sign
            r = mx.where(mx.logical_and(r != zero, (r < zero) != (a < zero)), r - safe, r)
        return mx.where(by_zero, zero, r)
    r = mx.remainder(a, b)
    if fmod:
        r = mx.where(mx.logical_and(r != 0, (r < 0) != (a < 0)), r - b, r)
    return r


BINARY = {
    "add": mx.add, "sub": mx.subtract, "mul": mx.multiply, "div": _div, "pow": mx.power,
    "max": mx.maximum, "min": mx.minimum, "mod": _mod, "atan2": mx.arctan2,
    "logical_and": mx.logical_and, "logical_or": mx.logical_or,
    "logical_xor": lambda a, b: mx.not_equal(a, b),
    "eq": mx.equal, "ne": mx.not_equal, "lt": mx.less, "le": mx.less_equal,
    "gt": mx.greater, "ge": mx.greater_equal,
}

# MLX computes these in float64 with its float32 approximations (relative error 1e-7
# to 1e-5 where f64 tolerances are 1e-9): f64 is not claimed for them.
F32_ACCURATE_ONLY = frozenset({"sin", "cos", "erf", "gelu"})

for _kind, _fn in {**UNARY, **BINARY}.items():
    lowering(_kind, exclude={DType.F64} if _kind in F32_ACCURATE_ONLY else ())(_fn)


@lowering("abs", context=True)
def abs_(ctx, x):
    """``|x|``; complex moduli on a GPU composed as ``hypot(re, im)`` (MLX's CUDA build
    fails to compile its fused complex ``abs``: no complex64 -> float conversion)."""
    if ctx.device != "gpu" or not mx.issubdtype(x.dtype, mx.complexfloating):
        return mx.abs(x)
    re, im = mx.abs(mx.real(x)), mx.abs(mx.imag(x))
    big, small = mx.maximum(re, im), mx.minimum(re, im)
    zero = mx.array(0, big.dtype)
    ratio = small / mx.where(big == zero, mx.array(1, big.dtype), big)  # <= 1: no overflow
    modulus = mx.where(big == zero, zero, big * mx.sqrt(1 + ratio * ratio))
    inf = mx.array(math.inf, big.dtype)
    return mx.where(mx.logical_or(re == inf, im == inf), inf, modulus)  # hypot(inf, nan) = inf


@lowering("where", low_float=True)
def where(c, a, b):
    return mx.where(c, a, b)


def cast_array(x, to):
    """Convert ``x`` to DType ``to`` as the ``cast`` op defines it (the reference's
    ``cast_array``): complex to real keeps the real part, float to int truncates, to bool
    is ``!= 0``."""
    from . import mx_dtype
    if mx.issubdtype(x.dtype, mx.complexfloating) and not to.is_complex:
        x = mx.real(x)
    if to.is_bool:
        return x != mx.array(0, x.dtype)
    if mx.issubdtype(x.dtype, mx.floating) and to.is_int:
        x = mx.where(x < 0, mx.ceil(x), mx.floor(x))  # trunc (MLX has no trunc op)
    return x.astype(mx_dtype(to))


@lowering("cast", low_float=True)
def cast(x, *, to):
    # 16-bit inputs convert directly: widening them to f32 first is exact.
    return cast_array(x, to)

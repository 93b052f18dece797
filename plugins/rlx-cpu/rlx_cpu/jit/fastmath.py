"""Vectorizable float32 exp, tanh, erf and sigmoid for numba kernels.

numba lowers ``np.exp`` / ``math.tanh`` / ``math.erf`` to scalar libm calls, which
LLVM cannot vectorize (the pip llvmlite has no SVML), so a loop over them runs 5-10x
slower than numpy's SIMD ufuncs. The functions here use only arithmetic, compares,
``floor``, selects and a bit cast, and are small enough for LLVM to inline them into
a kernel's loop and turn it into SIMD code (numba's own IR inlining would work too,
but costs about 0.2 s of compile time per use).

Accuracy (float32 results against float64 truth): exp within 1.5 ulp; tanh and erf
(``x P(x**2) / Q(x**2)`` rational fits) within 4e-7 relative -- well inside the
conformance tolerances (rtol 1e-4). Special values follow libm: ``exp(-inf) = 0``,
``exp(inf) = inf``, ``tanh(+-inf) = +-1``, ``erf(+-inf) = +-1``, NaN in gives NaN out;
exp results below float32's smallest normal flush to 0 (libm gives denormals there,
an absolute difference under 1.2e-38). The coefficients come from
``plugins/rlx-cpu/tools/fit_fastmath.py``.

``fast_exp`` & co. pick these for float32 and the libm functions for float64, so
generic kernels call one name for both.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

__all__ = ["exp32", "tanh32", "erf32", "sigmoid32", "fast_exp", "fast_tanh", "fast_erf", "fast_sigmoid"]

F32 = np.float32
_EXP = tuple(F32(c) for c in (1.0, 0.9999996423721313, 0.5000083446502686, 0.16659554839134216,
                              0.041954539716243744, 0.007742257788777351, 0.0019726271275430918))
_TANH_P = tuple(F32(c) for c in (1.0, 0.13377457857131958, 0.0034913993440568447, 2.05424330488313e-05,
                                 1.326719889505057e-08))
_TANH_Q = tuple(F32(c) for c in (1.0, 0.46710771322250366, 0.025860914960503578, 0.00032788788666948676,
                                 7.739696457065293e-07))
_ERF_P = tuple(F32(c) for c in (1.1283791065216064, 0.18996334075927734, 0.052690278738737106,
                                0.0037468934897333384, 0.0002845127892214805, 2.054016704278183e-06))
_ERF_Q = tuple(F32(c) for c in (1.0, 0.5016834139823914, 0.11392616480588913, 0.014931370504200459,
                                0.001158109400421381, 3.8113394111860543e-05))

_LOG2E = F32(1.0 / math.log(2))
_LN2_HI = F32(0.693359375)  # ln 2 split in two (Cody-Waite): n * _LN2_HI is exact for |n| < 2**10
_LN2_LO = F32(math.log(2) - 0.693359375)
_EXP_MAX = F32(88.72283)  # above: inf (e**x > FLT_MAX)
_EXP_MIN = F32(-87.33654)  # below: 0 (e**x < FLT_MIN, the smallest normal)
_ZERO, _ONE = F32(0), F32(1)
_INF = F32(np.inf)
_TANH_LIMIT = F32(9.0)  # |x| beyond: tanh(x) rounds to +-1
_ERF_LIMIT = F32(3.92)  # |x| beyond: erf(x) rounds to +-1


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret an int32's bits as a float32 (LLVM ``bitcast``, free in SIMD code)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _select(typingctx, condition, a, b):
    """``a if condition else b`` as one LLVM ``select``: no branch, a blend in SIMD code
    (``a`` and ``b`` share one type)."""
    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])
    return a(types.boolean, a, a), codegen


# The polynomials in Horner form, written out (a loop over the coefficient tuple would
# keep LLVM from vectorizing the caller's loop).
@njit
def _poly_exp(x):
    c = _EXP
    return c[0] + x * (c[1] + x * (c[2] + x * (c[3] + x * (c[4] + x * (c[5] + x * c[6])))))


@njit
def _odd_rational4(x, p, q):
    """x * P(x**2) / Q(x**2), both of degree 4."""
    u = x * x
    return x * (p[0] + u * (p[1] + u * (p[2] + u * (p[3] + u * p[4])))) / \
        (q[0] + u * (q[1] + u * (q[2] + u * (q[3] + u * q[4]))))


@njit
def _odd_rational5(x, p, q):
    """x * P(x**2) / Q(x**2), both of degree 5."""
    u = x * x
    return x * (p[0] + u * (p[1] + u * (p[2] + u * (p[3] + u * (p[4] + u * p[5]))))) / \
        (q[0] + u * (q[1] + u * (q[2] + u * (q[3] + u * (q[4] + u * q[5])))))


@njit
def exp32(x):
    """e**x for float32: x = n ln2 + r with 0 <= r < ln2, e**r by polynomial, 2**n by
    building the float's exponent bits."""
    xc = _select(x < _EXP_MIN, _EXP_MIN, x)
    xc = _select(xc > _EXP_MAX, _EXP_MAX, xc)
    xc = _select(xc != xc, _ZERO, xc)
    n = np.floor(xc * _LOG2E)
    r = xc - n * _LN2_HI - n * _LN2_LO
    y = _poly_exp(r) * _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))
    y = _select(x > _EXP_MAX, _INF, y)
    y = _select(x < _EXP_MIN, _ZERO, y)
    return _select(x != x, x, y)


@njit
def tanh32(x):
    """tanh for float32: a rational fit on [-9, 9], the argument clamped there."""
    xc = _select(x > _TANH_LIMIT, _TANH_LIMIT, x)
    xc = _select(xc < -_TANH_LIMIT, -_TANH_LIMIT, xc)
    return _odd_rational4(xc, _TANH_P, _TANH_Q)


@njit
def erf32(x):
    """erf for float32: a rational fit on [-3.92, 3.92], +-1 beyond."""
    xc = _select(x > _ERF_LIMIT, _ERF_LIMIT, x)
    xc = _select(xc < -_ERF_LIMIT, -_ERF_LIMIT, xc)
    y = _odd_rational5(xc, _ERF_P, _ERF_Q)
    return _select(x >= _ERF_LIMIT, _ONE, _select(x <= -_ERF_LIMIT, -_ONE, y))


@njit
def sigmoid32(x):
    """1 / (1 + e**-x) for float32 (0 and 1 at -inf and inf, NaN stays NaN)."""
    return _ONE / (_ONE + exp32(-x))


# --- one name for float32 and float64 ------------------------------------------------------
def fast_exp(x):
    """e**x (exp32 for float32, libm for float64)."""
    return np.exp(x)


def fast_tanh(x):
    """tanh (tanh32 for float32, libm for float64)."""
    return np.tanh(x)


def fast_erf(x):
    """erf (erf32 for float32, libm for float64)."""
    return math.erf(x)


def fast_sigmoid(x):
    """1 / (1 + e**-x) (sigmoid32 for float32)."""
    return 1.0 / (1.0 + np.exp(-x))


def _by_width(f32_impl, f64_impl):
    """An overload body choosing the float32 implementation for float32 arguments."""
    def choose(x):
        return f32_impl if x == types.float32 else f64_impl
    return choose


overload(fast_exp)(_by_width(lambda x: exp32(x), lambda x: np.exp(x)))
overload(fast_tanh)(_by_width(lambda x: tanh32(x), lambda x: np.tanh(x)))
overload(fast_erf)(_by_width(lambda x: erf32(x), lambda x: math.erf(x)))
overload(fast_sigmoid)(_by_width(lambda x: sigmoid32(x), lambda x: 1.0 / (1.0 + np.exp(-x))))

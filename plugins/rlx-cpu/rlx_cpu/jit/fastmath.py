"""Vectorizable float32 exp, tanh, erf and sigmoid for numba kernels.

numba lowers ``np.exp`` / ``math.tanh`` / ``math.erf`` to scalar libm calls, which
LLVM cannot vectorize (the pip llvmlite has no SVML), so a loop over them runs 5-10x
slower than numpy's SIMD ufuncs. The functions here use only arithmetic, compares,
``floor`` and a bit cast, which LLVM turns into SIMD code inside a kernel's loop.

Accuracy (float32 results against float64 truth): exp 2 ulp, tanh and erf 3 ulp,
well inside the conformance tolerances (rtol 1e-4). Special values follow libm:
``exp(-inf) = 0``, ``exp(inf) = inf``, NaN in gives NaN out; results below float32's
smallest normal flush to 0 (libm gives denormals there, an absolute difference under
1.2e-38). The coefficients come from ``plugins/rlx-cpu/tools/fit_fastmath.py``
(least-squares Chebyshev fits rounded to float32).

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
_TANH_SMALL = tuple(F32(c) for c in (1.0, -0.3333326280117035, 0.13331149518489838, -0.05372267961502075,
                                     0.020595679059624672, -0.005664775148034096))
_ERF_SMALL = tuple(F32(c) for c in (1.1283791065216064, -0.3761262595653534, 0.11283597350120544,
                                    -0.02685432881116867, 0.005189312156289816, -0.0008018855005502701,
                                    7.882497448008507e-05))
_ERFC_SCALED = tuple(F32(c) for c in (0.21080635488033295, -0.0743476003408432, 0.024938203394412994,
                                      -0.007999345660209656, 0.0024659824557602406, -0.0007389975944533944,
                                      0.00021297208149917424, -5.3585808927891776e-05, 1.4353662663779687e-05,
                                      -6.3860857153485995e-06, 1.6718017832317855e-06))

_LOG2E = F32(1.0 / math.log(2))
_LN2_HI = F32(0.693359375)  # ln 2 split in two (Cody-Waite): n * _LN2_HI is exact for |n| < 2**10
_LN2_LO = F32(math.log(2) - 0.693359375)
_EXP_MAX = F32(88.72283)  # above: inf (e**x > FLT_MAX)
_EXP_MIN = F32(-87.33654)  # below: 0 (e**x < FLT_MIN, the smallest normal)
_ZERO, _HALF, _ONE, _TWO, _FOUR = F32(0), F32(0.5), F32(1), F32(2), F32(4)
_INF = F32(np.inf)
_TANH_SPLIT = F32(0.625)  # tanh: polynomial below, exp-based formula above
_ERF_MID = F32(2.5)


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret an int32's bits as a float32 (LLVM ``bitcast``, free in SIMD code)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


# The polynomials in Horner form, written out (a loop over the coefficient tuple would
# keep LLVM from vectorizing the caller's loop).
@njit(inline="always")
def _poly_exp(x):
    c = _EXP
    return c[0] + x * (c[1] + x * (c[2] + x * (c[3] + x * (c[4] + x * (c[5] + x * c[6])))))


@njit(inline="always")
def _poly_tanh_small(x):
    c = _TANH_SMALL
    return c[0] + x * (c[1] + x * (c[2] + x * (c[3] + x * (c[4] + x * c[5]))))


@njit(inline="always")
def _poly_erf_small(x):
    c = _ERF_SMALL
    return c[0] + x * (c[1] + x * (c[2] + x * (c[3] + x * (c[4] + x * (c[5] + x * c[6])))))


@njit(inline="always")
def _poly_erfc_scaled(x):
    c = _ERFC_SCALED
    return c[0] + x * (c[1] + x * (c[2] + x * (c[3] + x * (c[4] + x * (c[5] + x * (c[6] + x * (
        c[7] + x * (c[8] + x * (c[9] + x * c[10])))))))))


@njit(inline="always")
def exp32(x):
    """e**x for float32: x = n ln2 + r with 0 <= r < ln2, e**r by polynomial, 2**n by
    building the float's exponent bits."""
    xc = _EXP_MIN if x < _EXP_MIN else x
    xc = _EXP_MAX if xc > _EXP_MAX else xc
    xc = _ZERO if xc != xc else xc
    n = np.floor(xc * _LOG2E)
    r = xc - n * _LN2_HI - n * _LN2_LO
    y = _poly_exp(r) * _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))
    y = _INF if x > _EXP_MAX else y
    y = _ZERO if x < _EXP_MIN else y
    return x if x != x else y


@njit(inline="always")
def tanh32(x):
    """tanh for float32: odd polynomial near 0 (keeps the relative accuracy there),
    ``1 - 2 / (e**2|x| + 1)`` elsewhere."""
    a = abs(x)
    small = x * _poly_tanh_small(x * x)
    large = _ONE - _TWO / (exp32(_TWO * a) + _ONE)
    large = -large if x < _ZERO else large
    return small if a < _TANH_SPLIT else (x if x != x else large)


@njit(inline="always")
def erf32(x):
    """erf for float32: odd polynomial for |x| < 1, ``1 - e**-x**2 * p(|x| - 2.5)`` for
    1 <= |x| < 4, +-1 beyond (erf(4) rounds to 1 in float32)."""
    a = abs(x)
    small = x * _poly_erf_small(x * x)
    ac = _FOUR if a > _FOUR else a
    large = _ONE - exp32(-(ac * ac)) * _poly_erfc_scaled(ac - _ERF_MID)
    large = _ONE if a >= _FOUR else large
    large = -large if x < _ZERO else large
    return small if a < _ONE else (x if x != x else large)


@njit(inline="always")
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


overload(fast_exp, inline="always")(_by_width(lambda x: exp32(x), lambda x: np.exp(x)))
overload(fast_tanh, inline="always")(_by_width(lambda x: tanh32(x), lambda x: np.tanh(x)))
overload(fast_erf, inline="always")(_by_width(lambda x: erf32(x), lambda x: math.erf(x)))
overload(fast_sigmoid, inline="always")(_by_width(lambda x: sigmoid32(x), lambda x: 1.0 / (1.0 + np.exp(-x))))

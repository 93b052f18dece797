"""Derive the polynomial coefficients of ``rlx_cpu.jit.fastmath`` and print their errors.

Each fit is a least-squares Chebyshev fit on 4000 Chebyshev nodes (near-minimax),
converted to monomial coefficients and rounded to float32; the error is measured
with float32 Horner evaluation against float64 truth. Needs scipy (for erf/erfc).

    python plugins/rlx-cpu/tools/fit_fastmath.py
"""
import math

import numpy as np
from numpy.polynomial import chebyshev
from scipy.special import erf, erfc

F32 = np.float32


def fit(f, lo, hi, degree, nodes=4000):
    k = np.arange(nodes)
    x = np.cos(np.pi * (k + 0.5) / nodes) * (hi - lo) / 2 + (hi + lo) / 2
    return chebyshev.cheb2poly(chebyshev.chebfit(x, f(x), degree)).astype(F32)


def horner32(coefs, x):
    acc = np.full_like(x, coefs[-1])
    for c in coefs[-2::-1]:
        acc = (acc * x + c).astype(F32)
    return acc


def report(name, coefs, max_rel_err):
    print(f"{name} = {tuple(float(c) for c in coefs)}  # max rel err {max_rel_err:.2e}")


def main():
    # e**r on [0, ln 2): the reduced argument of exp32.
    c = fit(np.exp, 0, math.log(2), 6)
    r = np.linspace(0, math.log(2), 200001).astype(F32)
    report("EXP", c, np.abs(horner32(c, r) / np.exp(r.astype(float)) - 1).max())

    # tanh(x)/x as a polynomial in u = x**2, for |x| < 0.625.
    c = fit(lambda u: np.tanh(np.sqrt(u)) / np.sqrt(np.maximum(u, 1e-30)), 0, 0.625 ** 2, 5)
    x = np.linspace(1e-6, 0.625, 200001).astype(F32)
    report("TANH_SMALL", c, np.abs(x * horner32(c, x * x) / np.tanh(x.astype(float)) - 1).max())

    # erf(x)/x as a polynomial in u = x**2, for |x| < 1.
    c = fit(lambda u: erf(np.sqrt(u)) / np.sqrt(np.maximum(u, 1e-30)), 0, 1.0, 6)
    x = np.linspace(1e-6, 1, 200001).astype(F32)
    report("ERF_SMALL", c, np.abs(x * horner32(c, x * x) / erf(x.astype(float)) - 1).max())

    # erfc(x) * e**(x**2) as a polynomial in t = x - 2.5, for 1 <= |x| < 4.
    c = fit(lambda t: erfc(t + 2.5) * np.exp((t + 2.5) ** 2), -1.5, 1.5, 10)
    x = np.linspace(1, 4, 200001).astype(F32)
    approx = 1 - np.exp(-x.astype(float) ** 2) * horner32(c, x - F32(2.5))
    report("ERFC_SCALED", c, np.abs(approx / erf(x.astype(float)) - 1).max())


if __name__ == "__main__":
    main()

"""Derive the coefficients of ``rlx_cpu.jit.fastmath`` and print their errors.

* exp: a polynomial for e**r on [0, ln 2): a least-squares Chebyshev fit on 4000
  Chebyshev nodes (near-minimax).
* tanh, erf: ``x * P(x**2) / Q(x**2)`` rational fits (relative error, Sanathanan-Koerner
  iteration: repeated linear least squares weighted by the previous denominator).

Coefficients are rounded to float32 and the error is measured with float32 Horner
evaluation against float64 truth. Needs scipy (erf).

    python plugins/rlx-cpu/tools/fit_fastmath.py
"""
import math

import numpy as np
from numpy.polynomial import chebyshev, polynomial
from scipy.special import erf

F32 = np.float32


def nodes(lo, hi, n=6000):
    k = np.arange(n)
    return np.cos(np.pi * (k + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2


def horner32(coefs, x):
    acc = np.full_like(x, coefs[-1])
    for c in coefs[-2::-1]:
        acc = (acc * x + c).astype(F32)
    return acc


def rational_fit(g, lo, hi, p_degree, q_degree, iterations=30):
    """P, Q (Q[0] = 1) with P(u)/Q(u) ~ g(u) on [lo, hi] in relative error."""
    u = nodes(lo, hi)
    y = g(u)
    weight = 1 / np.abs(y)
    q_prev = np.ones_like(u)
    for _ in range(iterations):
        a = np.hstack([u[:, None] ** np.arange(p_degree + 1), -(y[:, None] * u[:, None] ** np.arange(1, q_degree + 1))])
        scale = weight / q_prev
        sol = np.linalg.lstsq(a * scale[:, None], y * scale, rcond=None)[0]
        p, q = sol[:p_degree + 1], np.concatenate([[1.0], sol[p_degree + 1:]])
        q_prev = polynomial.polyval(u, q)
    return p.astype(F32), q.astype(F32)


def odd_rational_report(name, f, limit, p_degree, q_degree):
    """Fit f(x)/x = P(x**2)/Q(x**2) for |x| <= limit and report f's relative error."""
    p, q = rational_fit(lambda u: f(np.sqrt(u)) / np.sqrt(np.maximum(u, 1e-300)), 0, limit ** 2, p_degree, q_degree)
    x = np.linspace(1e-6, limit, 400001).astype(F32)
    u = x * x
    err = np.abs((x * horner32(p, u) / horner32(q, u)).astype(float) / f(x.astype(float)) - 1).max()
    print(f"{name}_P = {tuple(float(c) for c in p)}")
    print(f"{name}_Q = {tuple(float(c) for c in q)}  # max rel err {err:.2e}")


def main():
    c = chebyshev.cheb2poly(chebyshev.chebfit(nodes(0, math.log(2)), np.exp(nodes(0, math.log(2))), 6)).astype(F32)
    r = np.linspace(0, math.log(2), 200001).astype(F32)
    err = np.abs(horner32(c, r) / np.exp(r.astype(float)) - 1).max()
    print(f"EXP = {tuple(float(v) for v in c)}  # max rel err {err:.2e}")
    odd_rational_report("TANH", np.tanh, 9.0, 4, 4)
    odd_rational_report("ERF", erf, 3.92, 5, 5)


if __name__ == "__main__":
    main()

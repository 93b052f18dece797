"""Conformance cases of the 'linalg' family: matmul and dense_solve."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import COMPLEX, FLOATS, NUMERIC, DType
from .cases import Case, spec

_by_name = dict(key=lambda d: d.value)

# (a dims, b dims): vectors on either side, batch broadcasting, empty dims.
_MATMUL_SHAPES = [((2, 3), (3, 4)), ((3,), (3, 4)), ((2, 3), (3,)), ((5,), (5,)),
                  ((2, 1, 3, 4), (5, 4, 2)), ((3,), (2, 3, 4)), ((2, 0), (0, 3)), ((0, 3), (3, 2)),
                  ((0, 2, 3), (3, 4))]


def well_conditioned(rng, dims, dt):
    """Random square matrices whose diagonal dominates, so solves are well conditioned."""
    a = rng.standard_normal(dims)
    if dt.is_complex:
        a = a + 1j * rng.standard_normal(dims)
    return a + 2 * dims[-1] * np.eye(dims[-1])


def _matmul_cases():
    for dt in sorted(NUMERIC, **_by_name):
        shapes = _MATMUL_SHAPES if dt is DType.F32 else _MATMUL_SHAPES[:2]
        for da, db in shapes:
            yield Case(f"matmul{list(da)}x{list(db)}", "matmul", dt, {"a": spec(da, dt), "b": spec(db, dt)},
                       lambda g, a, b: g.matmul(a, b))
    for dt in (DType.I8, DType.U8, DType.I32):  # sums of products overflow and wrap
        big = spec((3, 16), dt, "int", low=0 if dt is DType.U8 else -100, high=100)
        yield Case("matmul/wraps", "matmul", dt, {"a": big, "b": spec((16, 2), dt, "int", low=0, high=100)},
                   lambda g, a, b: g.matmul(a, b))
    yield Case("matmul/long-sum", "matmul", DType.F32, {"a": spec((4, 256), "f32"), "b": spec((256, 3), "f32")},
               lambda g, a, b: g.matmul(a, b), tol=4)
    yield Case("matmul/weights", "matmul", DType.F32, {"x": spec((3, 4), "f32"), "w": spec((4, 2), "f32", param=True)},
               lambda g, x, w: x @ w)


# (A dims, b dims): vector and matrix right-hand sides, batches, broadcasting, N = 0.
_SOLVE_SHAPES = [((3, 3), (3,)), ((4, 4), (4, 2)), ((2, 4, 4), (2, 4)), ((2, 3, 3), (3,)),
                 ((2, 1, 3, 3), (5, 3, 2)), ((3, 3), (2, 3, 1)), ((0, 0), (0,)), ((0, 2, 2), (0, 2))]


def _solve_cases():
    for dt in sorted(FLOATS | COMPLEX, **_by_name):
        shapes = _SOLVE_SHAPES if dt in (DType.F32, DType.C64) else _SOLVE_SHAPES[:2]
        for da, db in shapes:
            yield Case(f"dense_solve{list(da)}|{list(db)}", "dense_solve", dt,
                       {"a": spec(da, dt, well_conditioned), "b": spec(db, dt)},
                       lambda g, a, b: g.dense_solve(a, b), tol=2)


def cases():
    yield from _matmul_cases()
    yield from _solve_cases()

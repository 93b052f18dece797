"""Conformance cases of the 'random' family (run under the session's RngOptions).

Uniform draws must match the reference exactly (``tol=0``): they are integer bit
manipulations plus one multiply-add. Normals go through ``log``/``cos``, which
backends round differently, so they use the dtype's usual tolerance -- except f64,
whose normals hold f32 values (a few f32 ulp apart between backends) and therefore
get f32's tolerance.
"""
from __future__ import annotations

from ..ir.dtypes import FLOATS, DType
from .cases import Case, spec
from .compare import tolerance

EXACT = 0.0


def _normal_tol(dt: DType) -> float:
    """Tolerance scale of a normal draw of ``dt`` (see the module docstring)."""
    return tolerance(DType.F32)[0] / tolerance(DType.F64)[0] if dt is DType.F64 else 1.0


def cases():
    for dt in sorted(FLOATS, key=lambda d: d.value):
        yield Case("uniform[3,5]", "rng_uniform", dt, {},
                   lambda g, t=dt: g.rng_uniform((3, 5), low=-2.0, high=3.0, dtype=t), tol=EXACT)
        yield Case("normal[4,6]", "rng_normal", dt, {},
                   lambda g, t=dt: g.rng_normal((4, 6), mean=0.5, scale=2.0, dtype=t), tol=_normal_tol(dt))
        yield Case("uniform/like-i32", "rng_uniform", dt, {"x": spec((2, 3), "i32")},
                   lambda g, x, t=dt: g.rng_uniform(like=x, dtype=t), tol=EXACT)
        yield Case("normal/like", "rng_normal", dt, {"x": spec((5,), dt)}, lambda g, x: g.rng_normal(like=x),
                   tol=_normal_tol(dt))
    f32 = DType.F32
    yield Case("uniform/scalar", "rng_uniform", f32, {}, lambda g: g.rng_uniform(()), tol=EXACT)
    yield Case("uniform/empty", "rng_uniform", f32, {}, lambda g: g.rng_uniform((0, 4)), tol=EXACT)
    yield Case("uniform/1031", "rng_uniform", f32, {}, lambda g: g.rng_uniform((1031,)), tol=EXACT)
    yield Case("uniform/low==high", "rng_uniform", f32, {},
               lambda g: g.rng_uniform((3,), low=1.5, high=1.5), tol=EXACT)
    yield Case("uniform/seed-attr", "rng_uniform", f32, {},
               lambda g: [g.rng_uniform((6,), seed=7), g.rng_uniform((6,), seed=7, key=3)], tol=EXACT)
    yield Case("normal/odd-count", "rng_normal", f32, {}, lambda g: g.rng_normal((7,)))
    yield Case("normal/scale0", "rng_normal", f32, {}, lambda g: g.rng_normal((4,), mean=-1.0, scale=0.0))
    yield Case("normal/two-nodes+add", "rng_normal", f32, {"x": spec((3, 4), f32)},
               lambda g, x: g.add(g.add(x, g.rng_normal((3, 4))), g.rng_normal((3, 4), scale=0.1)))

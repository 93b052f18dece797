"""Conformance cases for unary, binary, compare, where and cast."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.ops.elementwise import BINARY, COMPARE, UNARY
from ..ir.schema import get_schema
from .cases import Case, spec

# Inputs that keep each function inside its domain (and away from poles).
_DOMAIN = {
    "log": dict(gen="positive"), "sqrt": dict(gen="positive"), "rsqrt": dict(gen="positive"),
    "reciprocal": dict(gen="positive"), "tan": dict(gen="uniform", low=-1.2, high=1.2),
    "exp": dict(gen="uniform", low=-5, high=5), "round": dict(gen=lambda r, d, t: r.integers(-8, 8, d) / 2),
}
_SHAPES = [(2, 3, 4), (), (0, 5)]
_BROADCAST = [((2, 3, 4), (4,)), ((2, 1, 4), (1, 3, 1)), ((), (3,)), ((0, 3), (3,))]


def _nonzero(rng, dims, dt):
    v = rng.integers(1, 9, dims) * rng.choice([-1, 1], dims)
    return np.abs(v) if not dt.is_signed else v


def _ties(rng, dims, dt):
    """Small integers (as any dtype) so that equal values and ties occur."""
    v = rng.integers(-3, 4, dims)
    return np.abs(v) if not dt.is_signed else v


def _unary_cases():
    for kind, (dtypes, _) in UNARY.items():
        for dt in sorted(dtypes, key=lambda d: d.value):
            shapes = _SHAPES if dt is DType.F32 else _SHAPES[:1]
            for dims in shapes:
                yield Case(f"{kind}{list(dims)}", kind, dt, {"x": spec(dims, dt, **_DOMAIN.get(kind, {}))},
                           lambda g, x, k=kind: getattr(g, k)(x))
    for dims, gen in [((8,), lambda r, d, t: np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 2.5, np.inf, np.nan]))]:
        for kind in ("relu", "abs", "neg", "sign", "floor", "ceil", "round", "exp", "sigmoid", "tanh", "softplus"):
            yield Case(f"{kind}/specials", kind, DType.F32, {"x": spec(dims, "f32", gen)},
                       lambda g, x, k=kind: getattr(g, k)(x))


def _binary_cases():
    for kind, (dtypes, _) in {**BINARY, **{k: (get_schema(k).dtypes, v) for k, v in COMPARE.items()}}.items():
        for dt in sorted(dtypes, key=lambda d: d.value):
            pairs = _BROADCAST if dt is DType.F32 else _BROADCAST[:1]
            for da, db in pairs:
                a_gen, b_gen = "normal", "normal"
                if kind in ("div", "mod") and (dt.is_int or kind == "mod"):
                    b_gen = _nonzero
                if kind == "pow":
                    a_gen = "positive"
                if kind in COMPARE or kind in ("max", "min"):
                    a_gen = b_gen = _ties
                yield Case(f"{kind}{list(da)}x{list(db)}", kind, dt,
                           {"a": spec(da, dt, a_gen), "b": spec(db, dt, b_gen)},
                           lambda g, a, b, k=kind: getattr(g, k)(a, b))
    for dt in (DType.F32, DType.I32):
        yield Case("mod/fmod", "mod", dt, {"a": spec((3, 4), dt, _ties), "b": spec((4,), dt, _nonzero)},
                   lambda g, a, b: g.mod(a, b, fmod=True))
    yield Case("max/nan", "max", DType.F32,
               {"a": spec((4,), "f32", "values", values=[np.nan, 1, 2, np.nan]),
                "b": spec((4,), "f32", "values", values=[0, np.nan, 3, np.nan])},
               lambda g, a, b: [g.max(a, b), g.min(a, b)])


def _where_cases():
    for dt in DType:
        yield Case(f"where[2,3]/{dt.value}", "where", DType.BOOL,
                   {"c": spec((2, 3), "bool"), "a": spec((2, 3), dt), "b": spec((2, 3), dt)},
                   lambda g, c, a, b: g.where(c, a, b))
    yield Case("where/broadcast", "where", DType.BOOL,
               {"c": spec((2, 1, 4), "bool"), "a": spec((3, 1), "f32"), "b": spec((), "f32")},
               lambda g, c, a, b: g.where(c, a, b))


def _cast_cases():
    for src in DType:
        for dst in DType:
            gen = "normal"
            if (src.is_float or src.is_complex) and dst.is_int:
                gen = dict(gen="uniform", low=0 if not dst.is_signed else -100, high=100)
            if src.is_int and dst is DType.F16:
                gen = dict(gen="int", low=0 if not src.is_signed else -100, high=100)
            s = spec((3, 5), src, **(gen if isinstance(gen, dict) else {}))
            yield Case(f"cast->{dst.value}", "cast", src, {"x": s}, lambda g, x, t=dst: g.cast(x, t))
    yield Case("cast/wrap", "cast", DType.I32, {"x": spec((6,), "i32", "int", low=-300, high=300)},
               lambda g, x: [g.cast(x, "i8"), g.cast(x, "u8")])


def cases():
    yield from _unary_cases()
    yield from _binary_cases()
    yield from _where_cases()
    yield from _cast_cases()

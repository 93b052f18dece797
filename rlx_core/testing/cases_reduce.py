"""Conformance cases of the 'reduce' family: every kind on every dtype it accepts, then
(on f32 unless the point is a dtype) each attribute value that changes behaviour, rank 0,
empty tensors, nan, ties and integer wrap-around."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.ops.reduce import REDUCTIONS
from ..ir.schema import get_schema
from .cases import Case, spec

F32 = DType.F32
# nan, infinities and ties in one [2, 5] tensor
SPECIALS = [[1, np.nan, 3, np.inf, np.nan], [np.inf, 2, -np.inf, 2, 0]]


def _dtypes(kind):
    return sorted(get_schema(kind).dtypes, key=lambda d: d.value)


def _ties(rng, dims, dt):
    """Small integers (in any dtype) so that equal values occur; bools for bool."""
    if dt.is_bool:
        return rng.random(dims) < 0.5
    v = rng.integers(-3, 4, dims)
    return np.abs(v) if not dt.is_signed else v


def _near_one(rng, dims, dt):
    """Factors around 1 (small ints for integer dtypes): products stay finite and exact."""
    if dt.is_int:
        return rng.integers(1, 4, dims) * (rng.choice([-1, 1], dims) if dt.is_signed else 1)
    v = rng.uniform(0.5, 1.5, dims)
    return v + 1j * rng.uniform(-0.5, 0.5, dims) if dt.is_complex else v


def _with(values):
    """A generator that places ``values`` (nan, inf ...) among normal data."""
    def gen(rng, dims, dt):
        out = rng.standard_normal(dims)
        out.flat[:len(values)] = values
        return out
    return gen


def _reduce(kind, axes, keepdims=False):
    """The build function of a case that reduces its input with ``kind``."""
    return lambda g, x: getattr(g, REDUCTIONS[kind][0])(x, axes, keepdims)


def _reduction_cases():
    for kind, (_, _, _, empty) in REDUCTIONS.items():
        gen = _near_one if kind == "reduce_prod" else (_ties if kind in ("reduce_max", "reduce_min") else "normal")
        for dt in _dtypes(kind):
            yield Case(f"{kind}[2,3,4]/axis1", kind, dt, {"x": spec((2, 3, 4), dt, gen)}, _reduce(kind, (1,)))
        variants = [("all", (2, 3, 4), None, False), ("axes0,-1/keepdims", (2, 3, 4), (0, -1), True),
                    ("all/keepdims", (2, 3), None, True), ("none", (2, 3), (), False), ("rank0", (), None, False),
                    ("empty-kept[0,3]/axis1", (0, 3), (1,), False), ("long[1000]", (1000,), None, False)]
        if empty is not None:
            variants.append(("empty-reduced[0,3]/axis0", (0, 3), (0,), False))
        for name, dims, axes, keepdims in variants:
            yield Case(f"{kind}/{name}", kind, F32, {"x": spec(dims, F32, gen)}, _reduce(kind, axes, keepdims),
                       tol=10.0 if "long" in name else 1.0)
    yield Case("reduce_sum/i8-wraps", "reduce_sum", DType.I8, {"x": spec((4, 8), "i8", "int", low=60, high=128)},
               lambda g, x: g.sum(x, 1))
    yield Case("reduce_sum/u8-wraps", "reduce_sum", DType.U8, {"x": spec((4, 8), "u8", "int", low=100, high=256)},
               lambda g, x: g.sum(x, 1))
    yield Case("reduce_prod/i32-wraps", "reduce_prod", DType.I32,
               {"x": spec((3, 6), "i32", "int", low=1000, high=5000)}, lambda g, x: g.prod(x, 1))
    for kind in ("reduce_max", "reduce_min"):
        yield Case(f"{kind}/nan", kind, F32, {"x": spec((3, 4), F32, _with([np.nan, np.inf, -np.inf]))},
                   lambda g, x, k=kind: [getattr(g, k)(x, 1), getattr(g, k)(x, 0)])
    yield Case("reduce_mean/complex-all", "reduce_mean", DType.C64, {"x": spec((3, 5), "c64")},
               lambda g, x: g.mean(x))


def _arg_cases():
    for kind in ("argmax", "argmin"):
        for dt in _dtypes(kind):
            yield Case(f"{kind}[3,7]/ties", kind, dt, {"x": spec((3, 7), dt, _ties)},
                       lambda g, x, k=kind: getattr(g, k)(x))
        for name, dims, axis, keepdims in [("axis0", (4, 3, 2), 0, False), ("axis-2/keepdims", (4, 3, 2), -2, True),
                                           ("rank1", (9,), 0, False), ("empty-kept[0,4]", (0, 4), 1, False)]:
            yield Case(f"{kind}/{name}", kind, F32, {"x": spec(dims, F32)},
                       lambda g, x, k=kind, a=axis, kd=keepdims: getattr(g, k)(x, a, kd))
        yield Case(f"{kind}/nan", kind, F32, {"x": spec((2, 5), F32, "values", values=SPECIALS)},
                   lambda g, x, k=kind: getattr(g, k)(x))


def _softmax_cases():
    for kind in ("softmax", "log_softmax"):
        for dt in _dtypes(kind):
            yield Case(f"{kind}[2,3,5]", kind, dt, {"x": spec((2, 3, 5), dt)}, lambda g, x, k=kind: getattr(g, k)(x))
        variants = [("axis0", (4, 3), 0, "normal"), ("large", (3, 6), -1, dict(gen="uniform", low=-500, high=500)),
                    ("rank1", (7,), 0, "normal"), ("empty-rows[0,5]", (0, 5), -1, "normal"),
                    ("empty-axis[3,0]", (3, 0), -1, "normal"),
                    ("masked", (2, 4), -1, dict(gen=_with([-np.inf, -np.inf, 0.5])))]
        for name, dims, axis, gen in variants:
            s = spec(dims, F32, **gen) if isinstance(gen, dict) else spec(dims, F32, gen)
            yield Case(f"{kind}/{name}", kind, F32, {"x": s}, lambda g, x, k=kind, a=axis: getattr(g, k)(x, a))


def _cumsum_cases():
    for dt in _dtypes("cumsum"):
        yield Case("cumsum[3,5]/axis1", "cumsum", dt, {"x": spec((3, 5), dt)}, lambda g, x: g.cumsum(x, 1))
    for exclusive in (False, True):
        for reverse in (False, True):
            for axis in (0, -1):
                yield Case(f"cumsum/ex{int(exclusive)}-rev{int(reverse)}/axis{axis}", "cumsum", F32,
                           {"x": spec((4, 6), F32)},
                           lambda g, x, a=axis, e=exclusive, r=reverse: g.cumsum(x, a, e, reverse=r))
    for dt in (DType.I32, DType.C64):
        yield Case("cumsum/exclusive-reverse", "cumsum", dt, {"x": spec((2, 5), dt)},
                   lambda g, x: g.cumsum(x, 1, exclusive=True, reverse=True))
    yield Case("cumsum/i8-wraps", "cumsum", DType.I8, {"x": spec((2, 8), "i8", "int", low=50, high=128)},
               lambda g, x: g.cumsum(x, 1))
    yield Case("cumsum/empty-axis", "cumsum", F32, {"x": spec((3, 0), F32)}, lambda g, x: g.cumsum(x, 1, True))
    yield Case("cumsum/long", "cumsum", F32, {"x": spec((2, 500), F32)}, lambda g, x: g.cumsum(x, 1), tol=10.0)


def _topk_cases():
    for dt in _dtypes("topk"):
        yield Case("topk[3,8]/k3/ties", "topk", dt, {"x": spec((3, 8), dt, _ties)}, lambda g, x: g.topk(x, 3))
    for largest in (True, False):
        for is_sorted in (True, False):
            yield Case(f"topk/largest{int(largest)}-sorted{int(is_sorted)}/ties", "topk", F32,
                       {"x": spec((4, 9), F32, _ties)},
                       lambda g, x, lg=largest, s=is_sorted: g.topk(x, 4, largest=lg, sorted=s))
    variants = [("axis0", (6, 3), 2, 0), ("k0", (2, 5), 0, -1), ("k=n", (2, 5), 5, -1), ("rank1", (10,), 4, 0)]
    for name, dims, k, axis in variants:
        yield Case(f"topk/{name}", "topk", F32, {"x": spec(dims, F32)}, lambda g, x, k=k, a=axis: g.topk(x, k, a))
    for largest in (True, False):
        yield Case(f"topk/nan/largest{int(largest)}", "topk", F32,
                   {"x": spec((2, 5), F32, "values", values=SPECIALS)},
                   lambda g, x, lg=largest: g.topk(x, 3, largest=lg))


def cases():
    yield from _reduction_cases()
    yield from _arg_cases()
    yield from _softmax_cases()
    yield from _cumsum_cases()
    yield from _topk_cases()

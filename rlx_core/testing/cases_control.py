"""Conformance cases of the 'control' family (if / while / scan), nesting included."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .cases import Case, spec

_OPERAND_DTYPES = (DType.F32, DType.I32, DType.F16, DType.BF16, DType.F64, DType.C64, DType.BOOL)
_ZERO_I32 = np.int32(0)


def _flip(dt):
    """A branch body that changes every value of dtype ``dt``."""
    if dt is DType.BOOL:
        return lambda s, a: s.logical_not(a)
    return lambda s, a: s.neg(a)


def _counted(body, limit):
    """(cond, body) over (*values, i32 counter): apply ``body`` while counter < ``limit``."""
    return (lambda s, *vals: s.lt(vals[-1], limit),
            lambda s, *vals: (*body(s, *vals[:-1]), s.add(vals[-1], 1)))


def _outputs(scan_result):
    """``(carry, ys)`` of a scan builder as one flat list of outputs."""
    return [v for part in scan_result for v in (part if isinstance(part, tuple) else (part,))]


def _if_cases():
    for dt in _OPERAND_DTYPES:
        yield Case(f"if/{dt.value}", "if", DType.BOOL, {"p": spec((), "bool"), "x": spec((2, 3), dt)},
                   lambda g, p, x, flip=_flip(dt): g.cond(p, lambda s, a: a, flip, [x]))
    yield Case("if/cond[1]+two-outputs", "if", DType.BOOL,
               {"p": spec((1,), "bool"), "a": spec((4,), "f32"), "b": spec((4,), "f32")},
               lambda g, p, a, b: g.cond(p, lambda s, x, y: (s.add(x, y), s.mul(x, y)),
                                         lambda s, x, y: (s.sub(x, y), y), [a, b]))
    yield Case("if/no-operands", "if", DType.BOOL, {"p": spec((), "bool")},
               lambda g, p: g.cond(p, lambda s: s.constant(np.arange(3, dtype=np.float32)),
                                   lambda s: s.constant(np.ones(3, np.float32)), []))
    yield Case("if/computed-cond", "if", DType.BOOL, {"x": spec((), "f32"), "y": spec((5,), "f32")},
               lambda g, x, y: g.cond(g.gt(x, 0.0), lambda s, v: s.exp(v), lambda s, v: s.abs(v), [y]))


def _while_cases():
    cond, body = _counted(lambda s, v: (s.add(v, s.cast(s.constant(np.int32(1)), v.dtype)),), 5)
    for dt in (DType.F32, DType.I32, DType.F64, DType.F16, DType.BF16, DType.I64):
        yield Case(f"while/count5/{dt.value}", "while", dt, {"x": spec((3,), dt)},
                   lambda g, x: g.while_loop(cond, body, [x, g.constant(_ZERO_I32)]))
    f32 = DType.F32
    yield Case("while/max_iterations", "while", f32, {"x": spec((2, 2), f32)},
               lambda g, x: g.while_loop(lambda s, v: s.constant(True), lambda s, v: s.mul(v, 0.5), x,
                                         max_iterations=3))
    yield Case("while/zero-iterations", "while", f32, {"x": spec((2,), f32)},
               lambda g, x: g.while_loop(lambda s, v: s.constant(False), lambda s, v: s.exp(v), x))
    yield Case("while/halve-until-small", "while", f32, {"x": spec((), f32, "uniform", low=1, high=1000)},
               lambda g, x: g.while_loop(lambda s, v: s.gt(v, 1.0), lambda s, v: s.mul(v, 0.5), x))
    rng_cond, rng_body = _counted(lambda s, v: (s.add(v, s.rng_uniform((3,))),), 3)
    yield Case("while/rng-per-iteration", "while", f32, {"x": spec((3,), f32)},
               lambda g, x: g.while_loop(rng_cond, rng_body, [x, g.constant(_ZERO_I32)]), tol=0.0)


def _scan_cases():
    for dt in (DType.F32, DType.I32, DType.F64, DType.F16, DType.BF16, DType.C64):
        yield Case(f"scan/cumsum/{dt.value}", "scan", dt, {"c": spec((2,), dt), "xs": spec((5, 2), dt)},
                   lambda g, c, xs: g.scan(lambda s, acc, x: (s.add(acc, x), s.add(acc, x)), c, xs))
    f32 = DType.F32
    both = {"c": spec((3,), f32), "xs": spec((4, 3), f32)}
    yield Case("scan/reverse+two-ys", "scan", f32, both,
               lambda g, c, xs: _outputs(g.scan(lambda s, acc, x: (s.mul(acc, x), [s.add(acc, x), s.neg(x)]),
                                                c, xs, reverse=True)))
    yield Case("scan/map-no-carry", "scan", f32, {"xs": spec((6, 2), f32)},
               lambda g, xs: g.scan(lambda s, x: ((), s.tanh(x)), [], xs)[1])
    yield Case("scan/length0", "scan", f32, {"c": spec((3,), f32), "xs": spec((0, 3), f32)},
               lambda g, c, xs: g.scan(lambda s, acc, x: (s.add(acc, x), s.mul(acc, x)), c, xs))
    yield Case("scan/two-carries+two-xs", "scan", f32,
               {"a": spec((2,), f32), "b": spec((2,), "i32"), "u": spec((3, 2), f32), "v": spec((3, 2), "i32")},
               lambda g, a, b, u, v: _outputs(g.scan(
                   lambda s, ca, cb, ut, vt: ((s.add(ca, s.cast(vt, "f32")), s.add(cb, vt)), s.mul(ut, ca)),
                   [a, b], [u, v])))
    yield Case("scan/rng-per-step", "scan", f32, {"xs": spec((4, 2), f32)},
               lambda g, xs: g.scan(lambda s, x: ((), s.add(x, s.rng_uniform((2,)))), [], xs)[1], tol=0.0)
    inner = _counted(lambda s, v: (s.scan(lambda t, c, r: (t.add(c, r), t.mul(c, r)),
                                          s.constant(np.ones(2, np.float32)), v)[1],), 2)
    yield Case("scan/inside-while", "scan", f32, {"x": spec((3, 2), f32)},
               lambda g, x: g.while_loop(*inner, [x, g.constant(_ZERO_I32)]))
    yield Case("if/inside-scan", "scan", f32, {"p": spec((4,), "bool"), "xs": spec((4, 3), f32)},
               lambda g, p, xs: g.scan(lambda s, pt, x: ((), s.cond(pt, lambda b, v: b.exp(v),
                                                                    lambda b, v: b.neg(v), [x])), [], [p, xs])[1])


def cases():
    yield from _if_cases()
    yield from _while_cases()
    yield from _scan_cases()

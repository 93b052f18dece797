"""Conformance cases for constants, arange, and graphs whose outputs are inputs/params."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .cases import Case, spec


def cases():
    rng = np.random.default_rng(0)
    for dt in DType:
        value = (rng.standard_normal((2, 3)) * 4).astype(dt.np)
        yield Case("constant[2,3]", "constant", dt, {}, lambda g, v=value: g.constant(v))
        yield Case("identity", "input", dt, {"x": spec((3,), dt)}, lambda g, x: [x, x])
        yield Case("param-out", "param", dt, {"w": spec((2,), dt, param=True)}, lambda g, w: w)
    yield Case("constant/scalar", "constant", DType.F32, {}, lambda g: g.constant(np.float32(2.5)))
    for dt in (DType.I32, DType.I64, DType.F32, DType.F64, DType.F16, DType.BF16, DType.I8, DType.I16,
               DType.U8, DType.U32):
        yield Case("arange", "arange", dt, {}, lambda g, t=dt: g.arange(7, start=1, step=2, dtype=t))
    yield Case("arange/frac", "arange", DType.F32, {}, lambda g: g.arange(5, start=-1.0, step=0.25, dtype="f32"))

"""Conformance cases of the 'quant' family: quantize and dequantize."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import FLOATS, DType
from ..ir.ops.quant import DEQUANTIZABLE
from .cases import Case, spec

_by_name = dict(key=lambda d: d.value)


def _quantize_cases():
    for dt in sorted(FLOATS, **_by_name):
        # A power-of-two scale makes x / scale exact in every float dtype, so a backend
        # dividing in 16-bit floats rounds exactly like the f32 reference.
        x = spec((2, 3, 4), dt, "uniform", low=-40, high=40)
        yield Case("quantize/per-tensor/i8", "quantize", dt, {"x": x}, lambda g, x: g.quantize(x, 0.25))
        yield Case("quantize/per-tensor/u8+zp", "quantize", dt, {"x": x},
                   lambda g, x: g.quantize(x, 0.25, np.uint8(100)))
    f32 = DType.F32
    scales = np.array([0.25, 0.5, 2.0], np.float32)
    yield Case("quantize/per-axis1/i8+zp", "quantize", f32, {"x": spec((2, 3, 4), f32, "uniform", low=-300, high=300)},
               lambda g, x: g.quantize(x, scales, np.array([-3, 0, 7], np.int8)))
    yield Case("quantize/per-axis-1/u8", "quantize", f32, {"x": spec((2, 4, 3), f32, "uniform", low=-50, high=500)},
               lambda g, x: g.quantize(x, scales, axis=-1, to="u8"))
    yield Case("quantize/ties-to-even", "quantize", f32,
               {"x": spec((8,), f32, "values", values=[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 126.5, 127.5])},
               lambda g, x: [g.quantize(x, 1.0), g.quantize(x, 1.0, np.uint8(1))])
    yield Case("quantize/saturate", "quantize", f32,
               {"x": spec((6,), f32, "values", values=[-np.inf, -1e9, -129, 300, 1e9, np.inf])},
               lambda g, x: [g.quantize(x, 1.0), g.quantize(x, 1.0, np.uint8(0))])
    yield Case("quantize/scale-input", "quantize", f32,
               {"x": spec((3, 5), f32, "uniform", low=-10, high=10), "s": spec((3,), f32, "positive"),
                "zp": spec((3,), "u8", "int", low=0, high=255)},
               lambda g, x, s, zp: g.quantize(x, s, zp, axis=0))
    yield Case("quantize/rank0-empty", "quantize", f32, {"x": spec((), f32), "y": spec((0, 3), f32)},
               lambda g, x, y: [g.quantize(x, 0.01), g.quantize(y, 0.1)])


def _dequantize_cases():
    for dt in sorted(DEQUANTIZABLE, **_by_name):
        low, high = {DType.I8: (-128, 128), DType.U8: (0, 256), DType.I32: (-(2 ** 31), 2 ** 31 - 1)}[dt]
        q = spec((2, 3, 4), dt, "int", low=low, high=high)
        yield Case("dequantize/per-tensor", "dequantize", dt, {"q": q}, lambda g, q: g.dequantize(q, 0.125))
        zeros = {DType.I8: [-5, 0, 100], DType.U8: [0, 128, 255], DType.I32: [-(2 ** 31), 0, 2 ** 31 - 1]}[dt]
        yield Case("dequantize/per-axis+zp", "dequantize", dt, {"q": q},
                   lambda g, q, z=np.array(zeros, dt.np): g.dequantize(q, np.array([0.5, 0.01, 3.0], np.float32), z))
        small = spec((2, 3, 4), dt, "int", low=max(low, -1000), high=1000)  # no 16-bit overflow
        for scale_dt in sorted(FLOATS - {DType.F32}, **_by_name):
            yield Case(f"dequantize/scale-{scale_dt.value}", "dequantize", dt, {"q": small},
                       lambda g, q, s=np.array(0.125, scale_dt.np): g.dequantize(q, s, 3))
    yield Case("dequantize/inputs-axis0", "dequantize", DType.I8,
               {"q": spec((3, 2), "i8", "int", low=-128, high=128), "s": spec((3,), "f64", "positive"),
                "zp": spec((3,), "i8", "int", low=-128, high=128)},
               lambda g, q, s, zp: g.dequantize(q, s, zp, axis=-2))
    yield Case("dequantize/empty", "dequantize", DType.U8, {"q": spec((0, 4), "u8")},
               lambda g, q: g.dequantize(q, 2.0, 7))


def cases():
    yield from _quantize_cases()
    yield from _dequantize_cases()

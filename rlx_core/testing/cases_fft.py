"""Conformance cases of the 'fft' family, and of the stft / psd helpers built on it."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import COMPLEX, FLOATS, DType
from .cases import Case, spec

_BY_NAME = dict(key=lambda d: d.value)
# (name, input dims, builder keyword arguments) shared by fft and its inverse.
_FFT = [("[4,8]", (4, 8), {}), ("[3,5]/prime", (3, 5), {}), ("[6,4]/axis0", (6, 4), {"axis": 0}),
        ("[2,8]/crop-n5", (2, 8), {"n": 5}), ("[2,6]/pad-n9", (2, 6), {"n": 9}),
        ("[4,8]/forward", (4, 8), {"norm": "forward"}), ("[4,7]/ortho", (4, 7), {"norm": "ortho"}),
        ("[1]", (1,), {}), ("[0,8]/empty-batch", (0, 8), {}), ("[2,3,16]/axis-2", (2, 3, 16), {"axis": -2})]


def _fft_cases():
    for dt in sorted(COMPLEX, **_BY_NAME):
        for name, dims, kw in (_FFT if dt is DType.C64 else _FFT[:3]):
            yield Case(f"fft{name}", "fft", dt, {"x": spec(dims, dt)}, lambda g, x, kw=kw: g.fft(x, **kw), tol=4)
            yield Case(f"ifft{name}", "fft", dt, {"x": spec(dims, dt)}, lambda g, x, kw=kw: g.ifft(x, **kw), tol=4)
    yield Case("fft/roundtrip", "fft", DType.C64, {"x": spec((3, 12), "c64")},
               lambda g, x: g.ifft(g.fft(x, norm="ortho"), norm="ortho"))


def _rfft_cases():
    for dt in sorted(FLOATS, **_BY_NAME):
        yield Case("rfft[3,8]", "rfft", dt, {"x": spec((3, 8), dt)}, lambda g, x: g.rfft(x), tol=4)
    for dt in sorted(COMPLEX, **_BY_NAME):
        yield Case("irfft[3,5]", "irfft", dt, {"x": spec((3, 5), dt)}, lambda g, x: g.irfft(x), tol=4)
    f32 = DType.F32
    for name, dims, kw in [("[5,7]/odd", (5, 7), {}), ("[6,4]/axis0", (6, 4), {"axis": 0}),
                           ("[2,8]/n11", (2, 8), {"n": 11}), ("[2,8]/n4", (2, 8), {"n": 4}),
                           ("[3,9]/ortho", (3, 9), {"norm": "ortho"}), ("[1]", (1,), {})]:
        yield Case(f"rfft{name}", "rfft", f32, {"x": spec(dims, f32)}, lambda g, x, kw=kw: g.rfft(x, **kw), tol=4)
    for name, dims, kw in [("[2,6]/n11", (2, 6), {"n": 11}), ("[2,6]/n4-crop", (2, 6), {"n": 4}),
                           ("[5,3]/axis0", (5, 3), {"axis": 0}), ("[3,5]/forward", (3, 5), {"norm": "forward"}),
                           ("[1]/n1", (1,), {"n": 1}), ("[0,5]/empty-batch", (0, 5), {})]:
        yield Case(f"irfft{name}", "irfft", DType.C64, {"x": spec(dims, "c64")},
                   lambda g, x, kw=kw: g.irfft(x, **kw), tol=4)
    yield Case("rfft->irfft/odd-n", "irfft", DType.C64, {"x": spec((4, 9), f32)},
               lambda g, x: g.irfft(g.rfft(x), n=9))
    hann = np.hanning(8).astype(np.float32)
    yield Case("stft[2,40]/hann", "rfft", f32, {"x": spec((2, 40), f32)}, lambda g, x: g.stft(x, 8, 3, hann), tol=4)
    yield Case("stft[33]/rect", "rfft", DType.F64, {"x": spec((33,), "f64")}, lambda g, x: g.stft(x, 16, 16))
    yield Case("psd[3,10]", "rfft", f32, {"x": spec((3, 10), f32)}, lambda g, x: g.psd(x), tol=4)
    yield Case("psd[7,2]/axis0-f16", "rfft", DType.F16, {"x": spec((7, 2), "f16")}, lambda g, x: g.psd(x, axis=0))
    yield Case("fft_conv1d[2,13]*[5]", "irfft", DType.C64, {"a": spec((2, 13), f32), "b": spec((5,), f32)},
               lambda g, a, b: g.fft_conv1d(a, b), tol=4)
    yield Case("fft_conv1d[6]*[6]/f64", "irfft", DType.C128, {"a": spec((6,), "f64"), "b": spec((6,), "f64")},
               lambda g, a, b: g.fft_conv1d(a, b))


def _frame_cases():
    for dt in (DType.F32, DType.I32, DType.C64, DType.BOOL, DType.BF16):
        yield Case("frame[2,10]/len4-hop3", "frame", dt, {"x": spec((2, 10), dt)}, lambda g, x: g.frame(x, 4, 3))
    f32 = DType.F32
    for name, dims, args in [("[9,2]/axis0", (9, 2), (3, 2, 0)), ("[12]/hop>len", (12,), (2, 5, -1)),
                             ("[3]/too-short", (3,), (4, 1, -1)), ("[6]/len=T", (6,), (6, 2, -1))]:
        yield Case(f"frame{name}", "frame", f32, {"x": spec(dims, f32)}, lambda g, x, a=args: g.frame(x, *a))


def cases():
    yield from _fft_cases()
    yield from _rfft_cases()
    yield from _frame_cases()

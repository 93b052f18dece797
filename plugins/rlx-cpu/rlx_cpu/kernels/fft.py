"""FFTs on numpy's pocketfft, in the input's own precision, written into the output.

The reference transforms in double precision and rounds once; single-precision
pocketfft stays well inside the complex64/float32 tolerances (about 1e-6 relative)
and skips the double-precision copies. pocketfft keeps a small work buffer per call.
"""
from __future__ import annotations

import numpy as np

from . import Bound, Call, kernel

# kind -> (numpy function, {input dtype: the output dtype numpy gives for it})
_TRANSFORMS = {
    "rfft": (np.fft.rfft, {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128}),
    "irfft": (np.fft.irfft, {np.dtype(np.complex64): np.float32, np.dtype(np.complex128): np.float64}),
    "fft": (None, {np.dtype(np.complex64): np.complex64, np.dtype(np.complex128): np.complex128}),
}


@kernel(*_TRANSFORMS)
def fft_step(b: Bound):
    node, x, out = b.node, b.ins[0], b.outs[0]
    fn, out_dtypes = _TRANSFORMS[node.kind]
    if out_dtypes.get(x.dtype) != out.dtype or 0 in x.shape or 0 in out.shape:
        return None  # 16-bit floats and empty transforms: the reference
    a = node.attrs
    if node.kind == "fft":
        fn = np.fft.ifft if a["inverse"] else np.fft.fft
    return Call(fn, (x,), {"n": a["n"], "axis": a["axis"], "norm": a["norm"], "out": out})

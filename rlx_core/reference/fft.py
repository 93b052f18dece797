"""Reference kernels of the 'fft' family: numpy's pocketfft, always in double precision
(the result is rounded once to the node's dtype)."""
from __future__ import annotations

import numpy as np

from .kernels import kernel


@kernel("fft")
def fft(x, *, inverse, n, axis, norm):
    transform = np.fft.ifft if inverse else np.fft.fft
    return transform(x.astype(np.complex128), n=n, axis=axis, norm=norm).astype(x.dtype)


@kernel("rfft")
def rfft(x, *, n, axis, norm):
    out = np.complex128 if x.dtype == np.float64 else np.complex64
    return np.fft.rfft(x.astype(np.float64), n=n, axis=axis, norm=norm).astype(out)


@kernel("irfft")
def irfft(x, *, n, axis, norm):
    out = np.float64 if x.dtype == np.complex128 else np.float32
    return np.fft.irfft(x.astype(np.complex128), n=n, axis=axis, norm=norm).astype(out)


@kernel("frame")
def frame(x, *, frame_len, hop, axis):
    frames = 1 + (x.shape[axis] - frame_len) // hop if x.shape[axis] >= frame_len else 0
    starts = np.arange(frames) * hop
    return np.take(x, starts[:, None] + np.arange(frame_len), axis=axis)

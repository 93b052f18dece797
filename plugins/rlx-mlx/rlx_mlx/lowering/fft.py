"""Lowerings of the fft family (definitions: ``rlx_core.ir.ops.fft``), on ``mx.fft``.

MLX transforms complex64 (single precision) where the reference transforms in double
and rounds once; the difference stays inside the f32 tolerances. MLX has no
complex128, so f64 signals (whose spectra are c128) are not claimed. Normalization is
applied here (``backward``, ``ortho``, ``forward``) around MLX's default ``backward``
transforms.
"""
from __future__ import annotations

import math

import mlx.core as mx
import numpy as np

from . import lowering


def _scale(y, n: int, norm: str, inverse: bool):
    """Turn MLX's ``backward`` normalization (1/n on the inverse) into ``norm``'s."""
    if norm == "backward" or n == 0:
        return y
    factor = {("ortho", False): 1 / math.sqrt(n), ("forward", False): 1 / n,
              ("ortho", True): math.sqrt(n), ("forward", True): float(n)}[(norm, inverse)]
    return y * mx.array(factor, mx.float32)


def _resized(x, n: int, axis: int):
    """``x`` cropped or zero-padded to ``n`` along ``axis`` (what numpy's ``n=`` does)."""
    size = x.shape[axis]
    if size > n:
        return x[tuple(slice(0, n) if i == axis else slice(None) for i in range(x.ndim))]
    if size < n:
        return mx.pad(x, [(0, n - size) if i == axis else (0, 0) for i in range(x.ndim)])
    return x


@lowering("fft")
def fft(x, *, inverse, n, axis, norm):
    n = x.shape[axis] if n is None else n
    x = _resized(x, n, axis)
    if x.size == 0:
        return x
    y = (mx.fft.ifft if inverse else mx.fft.fft)(x, axis=axis)
    return _scale(y, n, norm, inverse)


@lowering("rfft")
def rfft(x, *, n, axis, norm):
    n = x.shape[axis] if n is None else n
    x = _resized(x, n, axis)
    if x.size == 0:
        dims = tuple(n // 2 + 1 if i == axis else d for i, d in enumerate(x.shape))
        return mx.zeros(dims, mx.complex64)
    return _scale(mx.fft.rfft(x, axis=axis), n, norm, False)


@lowering("irfft")
def irfft(x, *, n, axis, norm):
    """The spectrum is cropped or zero-padded to the ``n//2 + 1`` bins used, and the
    imaginary parts that a real signal cannot have (bin 0 and, for even ``n``, bin
    ``n/2``) are dropped explicitly: the op ignores them, and not every FFT library does."""
    n = 2 * (x.shape[axis] - 1) if n is None else n
    axis = axis % x.ndim
    bins = n // 2 + 1
    x = _resized(x, bins, axis)
    dims = tuple(n if i == axis else d for i, d in enumerate(x.shape))
    if 0 in dims:
        return mx.zeros(dims, mx.float32)
    keep_imag = np.ones(bins, bool)
    keep_imag[0] = False
    keep_imag[-1] &= n % 2 == 1
    keep_imag = mx.array(keep_imag.reshape((-1,) + (1,) * (x.ndim - 1 - axis)))
    x = mx.real(x) + mx.where(keep_imag, mx.imag(x), 0) * mx.array(1j, mx.complex64)
    return _scale(mx.fft.irfft(x, n=n, axis=axis), n, norm, True)


@lowering("frame", low_float=True)
def frame(x, *, frame_len, hop, axis):
    axis = axis % x.ndim
    frames = 1 + (x.shape[axis] - frame_len) // hop if x.shape[axis] >= frame_len else 0
    dims = tuple(x.shape[:axis]) + (frames, frame_len) + tuple(x.shape[axis + 1:])
    if 0 in dims:
        return mx.zeros(dims, x.dtype)
    starts = np.arange(frames) * hop
    return mx.take(x, mx.array((starts[:, None] + np.arange(frame_len)).astype(np.int32)), axis=axis)

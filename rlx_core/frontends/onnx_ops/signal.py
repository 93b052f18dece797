"""Signal processing: DFT, STFT, the window functions and MelWeightMatrix.

ONNX stores a complex tensor as a trailing axis of size 2 (real, imaginary), or of size
1 for a real signal; the IR has complex dtypes. The converters move between the two at
the op's edges and use the IR's ``fft`` / ``rfft`` / ``irfft`` / ``frame`` inside.
"""
from __future__ import annotations

import numpy as np

from ..onnx import onnx_dtype, onnx_op


def _to_complex(g, x):
    """``[..., 1]`` (real) or ``[..., 2]`` (real, imag) -> a complex tensor ``[...]``."""
    dims = list(x.dims[:-1])
    if x.dims[-1] == 1:
        return g.cast(g.reshape(x, dims), x.dtype.complex)
    re, im = g.split(x, [1, 1], axis=-1)
    cdt = x.dtype.complex
    return g.cast(g.reshape(re, dims), cdt) + g.cast(g.reshape(im, dims), cdt) * g.constant(np.array(1j, cdt.np))


def _from_complex(g, z, dtype):
    """A complex tensor -> ``[..., 2]`` (real, imag) of the real ``dtype``."""
    re = g.cast(z, dtype)
    im = g.cast(z * g.constant(np.array(-1j, z.dtype.np)), dtype)  # (a + bi)(-i) = b - ai
    return g.concat([g.unsqueeze(re, [-1]), g.unsqueeze(im, [-1])], axis=-1)


@onnx_op("DFT")
def dft(ctx):
    """Forward: ``fft`` (``rfft`` bins for ``onesided``); inverse: ``ifft``, or ``irfft``
    (a real ``[..., 1]`` result) for a onesided spectrum. ``dft_length`` crops or
    zero-pads the transformed axis first."""
    g = ctx.g
    x = ctx.input(0)
    if x.dims[-1] not in (1, 2):
        raise ctx.error(f"DFT input must end in an axis of 1 (real) or 2 (complex), got {list(x.dims)}")
    axis = int(ctx.const(2).reshape(-1)[0]) if ctx.version >= 20 and ctx.has(2) else ctx.attr(
        "axis", 1 if ctx.version < 20 else -2)
    axis = axis % x.rank
    if axis == x.rank - 1:
        raise ctx.error("DFT axis must not be the last (real/imaginary) axis")
    length = ctx.const(1)
    n = None if length is None or np.asarray(length).size == 0 else int(np.asarray(length).reshape(-1)[0])
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    z = _to_complex(g, x)
    if inverse and onesided:
        return g.unsqueeze(g.cast(g.irfft(z, n=n, axis=axis), x.dtype), [-1])
    spectrum = g.fft(z, n=n, axis=axis, inverse=inverse)
    if onesided:
        spectrum = g.slice(spectrum, [0], [spectrum.dims[axis] // 2 + 1], axes=[axis])
    return _from_complex(g, spectrum, x.dtype)


@onnx_op("STFT")
def stft(ctx):
    """``signal [B, T, 1|2]`` framed every ``frame_step`` samples, each frame times the
    window, transformed -> ``[B, frames, bins, 2]``."""
    g = ctx.g
    signal, window = ctx.input(0), ctx.input(2)
    step = int(ctx.const(1).reshape(-1)[0])
    frame_len = ctx.const(3)
    frame_len = window.dims[0] if frame_len is None else int(np.asarray(frame_len).reshape(-1)[0])
    z = _to_complex(g, signal)
    frames = g.frame(z, frame_len, step, axis=1)
    if window is not None:
        frames = frames * g.cast(window, z.dtype)
    spectrum = g.fft(frames, axis=-1)
    if ctx.attr("onesided", 1):
        spectrum = g.slice(spectrum, [0], [frame_len // 2 + 1], axes=[-1])
    return _from_complex(g, spectrum, signal.dtype)


# --- windows ----------------------------------------------------------------------------
_WINDOWS = {  # cosine-sum coefficients a_k: w_n = sum_k (-1)^k a_k cos(2 pi k n / N)
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25 / 46, 21 / 46),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@onnx_op(*_WINDOWS)
def window(ctx):
    """``N`` is the size (``periodic=1``, the default) or the size minus 1 (symmetric)."""
    size = int(ctx.const(0).reshape(-1)[0])
    denom = size if ctx.attr("periodic", 1) else size - 1
    n = np.arange(size, dtype=np.float64)
    w = sum((-1) ** k * a * np.cos(2 * np.pi * k * n / denom) for k, a in enumerate(_WINDOWS[ctx.op_type]))
    return w.astype(onnx_dtype(ctx.attr("output_datatype", 1)).np)


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx):
    """``[dft_length // 2 + 1, num_mel_bins]`` triangular filters (ONNX's definition):
    ``num_mel_bins + 2`` edges evenly spaced in mel (``2595 log10(1 + f / 700)``) between
    the edge frequencies, mapped to DFT bins ``floor((dft_length + 1) f / sample_rate)``;
    filter i rises from edge i to edge i+1 and falls to edge i+2."""
    bins, length, rate, low, high = (np.asarray(ctx.const(i)).reshape(-1)[0] for i in range(5))
    bins, length = int(bins), int(length)
    mel = lambda f: 2595 * np.log1p(f / 700) / np.log(10)  # noqa: E731
    step = (mel(high) - mel(low)) / (bins + 2)
    hertz = 700 * np.expm1((np.arange(bins + 2) * step + mel(low)) / 2595 * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i:i + 3]
        if center == left:
            out[center, i] = 1
        else:
            out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out.astype(onnx_dtype(ctx.attr("output_datatype", 1)).np)

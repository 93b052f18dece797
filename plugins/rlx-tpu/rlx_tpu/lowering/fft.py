"""Lowerings of the fft family (definitions: ``rlx_core.ir.ops.fft``), on XLA's FFT.

XLA transforms in the input's precision (c64 in single precision), where the reference
transforms in double and rounds once; the difference stays far inside the f32
tolerances.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import lowering


@lowering("fft")
def fft(x, *, inverse, n, axis, norm):
    transform = jnp.fft.ifft if inverse else jnp.fft.fft
    return transform(x, n=n, axis=axis, norm=norm)


@lowering("rfft")
def rfft(x, *, n, axis, norm):
    return jnp.fft.rfft(x, n=n, axis=axis, norm=norm)


@lowering("irfft")
def irfft(x, *, n, axis, norm):
    """The spectrum is cropped or zero-padded to the ``n//2 + 1`` bins used, and the
    imaginary parts that a real signal cannot have (bin 0 and, for even ``n``, bin
    ``n/2``) are dropped explicitly: the op ignores them, and not every FFT library does."""
    bins = n // 2 + 1
    size = x.shape[axis]
    x = lax.slice_in_dim(x, 0, min(size, bins), axis=axis)
    if size < bins:
        x = jnp.concatenate([x, jnp.zeros(x.shape[:axis] + (bins - size,) + x.shape[axis + 1:], x.dtype)], axis)
    real_only = np.zeros(bins, bool)
    real_only[0] = True
    real_only[-1] |= n % 2 == 0
    keep_imag = (~real_only).astype(jnp.real(x).dtype).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    x = lax.complex(jnp.real(x), jnp.imag(x) * keep_imag)
    return jnp.fft.irfft(x, n=n, axis=axis, norm=norm)


@lowering("frame", low_float=True)
def frame(x, *, frame_len, hop, axis):
    frames = 1 + (x.shape[axis] - frame_len) // hop if x.shape[axis] >= frame_len else 0
    starts = np.arange(frames) * hop
    return jnp.take(x, starts[:, None] + np.arange(frame_len), axis=axis)

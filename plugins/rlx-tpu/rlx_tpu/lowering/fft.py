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
    x = lax.slice_in_dim(x, 0, min(x.shape[axis], bins), axis=axis)
    x = jnp.pad(x, [(0, bins - x.shape[axis]) if i == axis else (0, 0) for i in range(x.ndim)])
    keep_imag = np.ones(bins, bool)
    keep_imag[0] = False
    keep_imag[-1] &= n % 2 == 1
    keep_imag = keep_imag.reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    x = lax.complex(jnp.real(x), jnp.where(keep_imag, jnp.imag(x), 0))
    return jnp.fft.irfft(x, n=n, axis=axis, norm=norm)


@lowering("frame", low_float=True)
def frame(x, *, frame_len, hop, axis):
    frames = 1 + (x.shape[axis] - frame_len) // hop if x.shape[axis] >= frame_len else 0
    starts = np.arange(frames) * hop
    return jnp.take(x, starts[:, None] + np.arange(frame_len), axis=axis)

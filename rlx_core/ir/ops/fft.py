"""Discrete Fourier transforms (``fft``, ``rfft``, ``irfft``), signal framing (``frame``)
and the spectral helpers built on them (``stft``, ``psd``, ``fft_conv1d``, ``fftfreq``).

Conventions, and where they differ from the original RLX:

* Spectra are complex tensors (c64 / c128). The original RLX stored a spectrum of a
  real dtype in a "2N real-block" layout ``[re_0..re_{N-1}, im_0..im_{N-1}]``; here a
  real signal goes through ``rfft`` and comes back through ``irfft``.
* ``norm`` has numpy's meaning, with ``X_k = sum_j x_j exp(-2 pi i jk/n)``:
  ``"backward"`` (default) leaves the forward transform unscaled and scales the
  inverse by ``1/n``; ``"forward"`` scales the forward by ``1/n`` and leaves the inverse
  unscaled; ``"ortho"`` scales both by ``1/sqrt(n)``. So ``ifft(fft(x)) == x`` in every
  mode. (The original RLX's "backward" left *both* directions unscaled.)
* One axis per node (``axis``, default -1), any length (not only powers of two), and
  ``n`` crops or zero-pads that axis first, as numpy does. Shape rules store ``axis``
  non-negative and ``n`` explicit, so backends see canonical attributes.
"""
from __future__ import annotations

import numpy as np

from ...errors import OpAttributeError, ShapeError
from ..dtypes import COMPLEX, FLOATS
from ..schema import Attr, op
from ..shape import Shape, normalize_axis

NORMS = ("backward", "forward", "ortho")

_AXIS = {"axis": Attr("int", -1, "the transformed axis"),
         "n": Attr("int", None, "transform length: the axis is cropped or zero-padded to it", optional=True),
         "norm": Attr("str", "backward", "backward | forward | ortho (numpy's meaning)")}


def _transform_axis(kind, a, x, default_n):
    """Canonicalize ``axis``, ``norm`` and ``n`` (``default_n(axis length)`` when None)."""
    if a.norm not in NORMS:
        raise OpAttributeError(f"{kind} norm must be one of {', '.join(NORMS)}, got {a.norm!r}")
    a.axis = normalize_axis(a.axis, x.rank, f"{kind} axis")
    length = x.dims[a.axis]
    if a.n is None:
        a.n = default_n(length)
    if a.n < 1:
        raise OpAttributeError(f"{kind} needs a transform length n >= 1, got n={a.n} "
                               f"(axis {a.axis} of {list(x.dims)} has length {length})")


def _with_axis(dims, axis, size):
    return dims[:axis] + (size,) + dims[axis + 1:]


@op("fft", inputs="x", attrs={"inverse": Attr("bool", False, "inverse transform (+ sign in the exponent)"),
                              **_AXIS}, dtypes=COMPLEX)
def fft(a, x):
    """Complex DFT along ``axis``: ``X_k = s * sum_j x_j exp(-/+ 2 pi i jk/n)`` (``+`` when
    ``inverse``), ``s`` set by ``norm`` (see the module docstring: numpy's definitions,
    not the original RLX's unscaled "backward"). The axis is first cropped or
    zero-padded to ``n`` (default: its length, which must then be >= 1). Output: the
    input's dims with the axis of length ``n``, the input's complex dtype."""
    _transform_axis("fft", a, x, lambda length: length)
    return Shape(_with_axis(x.dims, a.axis, a.n), x.dtype)


@op("rfft", inputs="x", attrs=_AXIS, dtypes=FLOATS)
def rfft(a, x):
    """Real-input DFT along ``axis``: the first ``n//2 + 1`` bins of ``fft(x)`` (the rest
    are their conjugates), ``x`` cropped or zero-padded to ``n`` first (default: the
    axis length). Output dtype is complex: c128 for f64 input, else c64 (f16/bf16 are
    transformed in f32). ``norm`` as for ``fft``."""
    _transform_axis("rfft", a, x, lambda length: length)
    return Shape(_with_axis(x.dims, a.axis, a.n // 2 + 1), x.dtype.complex)


@op("irfft", inputs="x", attrs=_AXIS, dtypes=COMPLEX)
def irfft(a, x):
    """Inverse of ``rfft``: the real signal of length ``n`` (default ``2 * (m - 1)`` for
    ``m`` input bins) whose half spectrum is ``x``. The first ``n//2 + 1`` bins are used
    (zero-padded if fewer); the spectrum is taken as Hermitian, so the imaginary
    parts of bin 0 and, for even ``n``, bin ``n/2`` are ignored (as numpy, scipy and
    torch do). Output dtype is the real part's: f32 for c64, f64 for c128."""
    _transform_axis("irfft", a, x, lambda length: 2 * (length - 1))
    return Shape(_with_axis(x.dims, a.axis, a.n), x.dtype.real)


@op("frame", inputs="x", attrs={"frame_len": Attr("int", doc="samples per frame"),
                                "hop": Attr("int", doc="samples between frame starts"),
                                "axis": Attr("int", -1, "the framed axis")})
def frame(a, x):
    """Overlapping frames of ``x`` along ``axis`` (torch's ``unfold``, tf.signal.frame):
    frame ``f`` holds samples ``f * hop .. f * hop + frame_len - 1``. The axis of length
    ``T`` becomes two axes ``(frames, frame_len)`` with ``frames = 1 + (T - frame_len)
    // hop`` (trailing samples that do not fill a frame are dropped; 0 frames when
    ``T < frame_len``). Any dtype."""
    if a.frame_len < 1 or a.hop < 1:
        raise OpAttributeError(f"frame needs frame_len >= 1 and hop >= 1, got frame_len={a.frame_len}, hop={a.hop}")
    a.axis = normalize_axis(a.axis, x.rank, "frame axis")
    length = x.dims[a.axis]
    frames = 1 + (length - a.frame_len) // a.hop if length >= a.frame_len else 0
    return Shape(x.dims[:a.axis] + (frames, a.frame_len) + x.dims[a.axis + 1:], x.dtype)


class FftBuilders:
    def fft(self, x, n: int | None = None, axis: int = -1, norm: str = "backward", *, inverse: bool = False,
            name=None, shape=None):
        """Complex DFT of ``x`` along ``axis`` (real float input is cast to complex first)."""
        x = self.as_value(x)
        if x.dtype.is_float:
            x = self.cast(x, x.dtype.complex)
        return self.add_node("fft", (x,), {"inverse": inverse, "n": n, "axis": axis, "norm": norm},
                             shape=shape, name=name)

    def ifft(self, x, n: int | None = None, axis: int = -1, norm: str = "backward", *, name=None, shape=None):
        """Inverse complex DFT: ``fft(x, ..., inverse=True)``."""
        return self.fft(x, n, axis, norm, inverse=True, name=name, shape=shape)

    def rfft(self, x, n: int | None = None, axis: int = -1, norm: str = "backward", *, name=None, shape=None):
        """Half spectrum (``n//2 + 1`` bins) of a real signal along ``axis``."""
        return self.add_node("rfft", (self.as_value(x),), {"n": n, "axis": axis, "norm": norm},
                             shape=shape, name=name)

    def irfft(self, x, n: int | None = None, axis: int = -1, norm: str = "backward", *, name=None, shape=None):
        """Real signal of length ``n`` (default ``2 * (bins - 1)``) from a half spectrum."""
        return self.add_node("irfft", (self.as_value(x),), {"n": n, "axis": axis, "norm": norm},
                             shape=shape, name=name)

    def frame(self, x, frame_len: int, hop: int, axis: int = -1, *, name=None, shape=None):
        """Frames of ``frame_len`` samples every ``hop`` samples along ``axis``."""
        return self.add_node("frame", (self.as_value(x),), {"frame_len": frame_len, "hop": hop, "axis": axis},
                             shape=shape, name=name)

    # --- helpers composed of the kinds above -------------------------------------------
    def fftfreq(self, n: int, d: float = 1.0, dtype="f32", *, name=None):
        """Constant: the sample frequencies of an ``n``-point ``fft`` with sample spacing
        ``d``: ``[0, 1, ..., ceil(n/2) - 1, -floor(n/2), ..., -1] / (d * n)`` (numpy's)."""
        _check_freq_args("fftfreq", n, d)
        return self.constant(np.fft.fftfreq(n, d), dtype, name=name)

    def rfftfreq(self, n: int, d: float = 1.0, dtype="f32", *, name=None):
        """Constant: the ``n//2 + 1`` sample frequencies of an ``n``-point ``rfft``:
        ``[0, 1, ..., n//2] / (d * n)`` (numpy's)."""
        _check_freq_args("rfftfreq", n, d)
        return self.constant(np.fft.rfftfreq(n, d), dtype, name=name)

    def stft(self, x, frame_len: int, hop: int, window=None, norm: str = "backward", *, name=None):
        """Short-time Fourier transform of real ``x`` along its last axis:
        ``rfft(frame(x, frame_len, hop) * window)`` -> ``[..., frames, frame_len//2 + 1]``
        complex. ``window`` (length ``frame_len``; a Value or an array, default
        rectangular) multiplies every frame. Equals ``torch.stft(x, n_fft=frame_len,
        hop_length=hop, window=window, center=False, onesided=True,
        return_complex=True)`` with the last two axes swapped (torch puts bins first)."""
        x = self.as_value(x)
        frames = self.frame(x, frame_len, hop)
        if window is not None:
            window = self.as_value(window, x.dtype)
            if window.dims != (frame_len,):
                raise ShapeError(f"stft window must have dims [{frame_len}] (frame_len), got {list(window.dims)}")
            frames = self.mul(frames, window)
        return self.rfft(frames, norm=norm, name=name)

    def psd(self, x, axis: int = -1, *, name=None):
        """Power spectrum of real ``x`` along ``axis``: ``|rfft(x)_k|**2 / n`` for
        ``k = 0 .. n//2``, ``n`` the axis length, in ``x``'s dtype. It is the
        periodogram *without* one-sided doubling: the full spectrum's powers sum to
        ``sum(x**2)`` (Parseval), and scipy.signal.periodogram (density, fs=1) equals
        it times 2 in every bin except DC and, for even ``n``, Nyquist."""
        x = self.as_value(x)
        n = x.dims[normalize_axis(axis, x.rank, "psd axis")]
        magnitude = self.abs(self.rfft(x, axis=axis))
        power, count = self.mul(magnitude, magnitude), self.as_value(float(n), magnitude.dtype)
        if power.dtype == x.dtype:
            return self.div(power, count, name=name)
        return self.cast(self.div(power, count), x.dtype, name=name)

    def fft_conv1d(self, a, b):
        """Full linear convolution of real signals along the last axis, numpy's
        ``np.convolve(a, b)``: ``y[k] = sum_j a[j] b[k - j]``, of length ``la + lb - 1``
        (leading axes broadcast). Computed as ``irfft(rfft(a, N) * rfft(b, N), N)``
        cropped to that length, with ``N = fast_fft_length(la + lb - 1)``; the result
        has the operands' common float dtype."""
        a, b = self.promote_operands(a, b)
        if not a.dtype.is_float or a.rank == 0 or b.rank == 0 or 0 in (a.dims[-1], b.dims[-1]):
            raise ShapeError(f"fft_conv1d needs real float signals of rank >= 1 with non-empty last axes, "
                             f"got {a.shape} and {b.shape}")
        length = a.dims[-1] + b.dims[-1] - 1
        size = fast_fft_length(length)
        full = self.irfft(self.mul(self.rfft(a, n=size), self.rfft(b, n=size)), n=size)
        if size > length:
            full = self.slice(full, [0], [length], axes=[-1])
        return self.cast(full, a.dtype)


def fast_fft_length(n: int) -> int:
    """The smallest ``2**p * 3**q * 5**r >= n`` (``n >= 1``): a length every FFT
    implementation transforms quickly (scipy's ``next_fast_len(n, real=True)``)."""
    best = 1 << (n - 1).bit_length()
    five = 1
    while five < best:
        odd = five  # runs over 3**q * 5**r
        while odd < best:
            best = min(best, odd << ((n - 1) // odd).bit_length())  # odd * the least power of 2 reaching n
            odd *= 3
        five *= 5
    return best


def _check_freq_args(what, n, d):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise OpAttributeError(f"{what} needs an integer n >= 1, got {n!r}")
    if not np.isfinite(d) or d == 0:
        raise OpAttributeError(f"{what} needs a finite, non-zero sample spacing d, got {d!r}")

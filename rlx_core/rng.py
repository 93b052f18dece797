"""Counter-based random numbers shared by the in-graph rng ops, samplers and backends.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3") is the
default generator: a block cipher over a 128-bit counter, so any element of a stream
can be computed independently -- which is what lets every backend produce the same
bits for the same seed and node. Conventions (fixed; tests pin them):

* The standard Philox4x32-10 of Random123 (multipliers 0xD2511F53, 0xCD9E8D57; the
  original RLX used 0xD2561A75, which fails Random123's known-answer tests).
* key = (seed & 0xffffffff, seed >> 32); the counter starts at 0 and its low word
  increments first; each block yields 4 u32 consumed in order.
* ``u32 -> f32 in [0, 1)``: ``(u >> 8) * 2**-24`` (exact).
* uniform(lo, hi) = ``lo + u * (hi - lo)`` in f32.
* normal: Box-Muller, cosine branch, two u32 per sample, ``u1`` floored at the smallest
  normal f32: ``sqrt(-2 ln u1) * cos(2 pi u2)``. Uniform bits are identical on every
  backend; normals agree to a few ulp (each backend's libm rounds ``log``/``cos``).
* An rng node's stream key is ``combine_seed(options.seed, node.key)``.

The ``ort`` mode reproduces onnxruntime's CPU RandomUniform / RandomNormal kernels
bit for bit (see :func:`ort_uniform`, :func:`ort_normal`), and :func:`draw` is the
one entry point that rng kernels of every backend call to fill an output.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from dataclasses import dataclass, replace

import numpy as np

from .errors import RlxError

__all__ = ["RngOptions", "RNG_MODES", "combine_seed", "fold_in", "philox4x32_10", "philox_blocks",
           "philox_u32", "u32_to_unit", "box_muller", "philox_uniform", "philox_normal", "Philox",
           "minstd_rand0", "ort_canonical", "ort_uniform", "ort_normal", "draw"]

_MASK32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Random123's constants (its known-answer tests pass)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_GOLDEN64 = 0x9E3779B97F4A7C15
_TINY = np.float32(np.finfo(np.float32).tiny)
_FOLD_TAG = 0x666F6C64  # 'fold': keeps fold_in's counters apart from stream counters

RNG_MODES = ("philox", "ort", "zero")


@dataclass(frozen=True)
class RngOptions:
    """How rng ops fill their outputs: ``philox`` (default), ``ort`` (onnxruntime's
    RandomNormal/RandomUniform for the same seed) or ``zero`` (all zeros, for tests)."""

    seed: int = 42
    mode: str = "philox"

    def __post_init__(self):
        if self.mode not in RNG_MODES:
            raise RlxError(f"rng mode must be one of {', '.join(RNG_MODES)}, got {self.mode!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise RlxError(f"rng seed must be an integer, got {self.seed!r}")
        object.__setattr__(self, "seed", self.seed % 2**64)

    def fold_in(self, data: int) -> "RngOptions":
        """These options with ``seed`` replaced by ``fold_in(seed, data)`` (same mode).

        Control flow runs each subgraph execution under ``options.fold_in(i)`` (``i``
        the iteration, 0 for if branches), so an rng node in a loop body draws fresh
        numbers on every iteration, yet the whole run stays a function of the options.
        """
        return replace(self, seed=fold_in(self.seed, data))


def combine_seed(seed: int, key: int) -> int:
    """The per-node stream seed: ``seed + key * 0x9E3779B97F4A7C15 (mod 2**64)``."""
    return (seed + key * _GOLDEN64) % 2**64


def fold_in(seed: int, data: int) -> int:
    """A new 64-bit seed derived from ``seed`` and ``data`` (both taken mod 2**64).

    It is the first two words of the Philox block at counter ``(data, 'fold')`` under
    key ``seed``: a pseudo-random function, so unlike ``combine_seed`` it is not
    linear -- nested folds ``fold_in(fold_in(s, i), j)`` do not collide for (i, j)
    and (j, i).
    """
    seed, data = seed % 2**64, data % 2**64
    block = philox4x32_10(data & _MASK32, data >> 32, _FOLD_TAG, 0, seed & _MASK32, seed >> 32)
    return int(block[0]) | int(block[1]) << 32


def philox4x32_10(c0, c1, c2, c3, k0: int, k1: int) -> np.ndarray:
    """The Philox4x32-10 bijection on counter words (u64 arrays holding u32 values)."""
    m0, m1, s32, mask = np.uint64(_M0), np.uint64(_M1), np.uint64(32), np.uint64(_MASK32)
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3))
    for _ in range(10):
        p0, p1 = c0 * m0, c2 * m1
        c0, c1, c2, c3 = (p1 >> s32) ^ c1 ^ np.uint64(k0), p1 & mask, (p0 >> s32) ^ c3 ^ np.uint64(k1), p0 & mask
        k0, k1 = (k0 + _W0) & _MASK32, (k1 + _W1) & _MASK32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def philox_blocks(seed: int, first_block: int, nblocks: int) -> np.ndarray:
    """``nblocks`` blocks for counters ``first_block ...`` under key ``seed``: [n, 4] u32."""
    idx = np.arange(first_block, first_block + nblocks, dtype=np.uint64)
    zero = np.zeros_like(idx)
    return philox4x32_10(idx & np.uint64(_MASK32), idx >> np.uint64(32), zero, zero,
                         seed & _MASK32, (seed >> 32) & _MASK32)


def philox_u32(seed: int, n: int, offset: int = 0) -> np.ndarray:
    """Elements ``offset .. offset+n`` of the u32 stream for ``seed``."""
    first, skip = divmod(offset, 4)
    blocks = philox_blocks(seed, first, (skip + n + 3) // 4)
    return blocks.reshape(-1)[skip:skip + n]


def u32_to_unit(u: np.ndarray) -> np.ndarray:
    """u32 -> f32 in [0, 1) with 24 random bits (exact)."""
    return (u >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def box_muller(u1: np.ndarray, u2: np.ndarray) -> np.ndarray:
    """Standard normals from two uniform arrays (cosine branch, f32)."""
    u1 = np.maximum(u1, _TINY)
    return (np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(2 * np.pi) * u2)).astype(np.float32)


def philox_uniform(seed: int, n: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    u = u32_to_unit(philox_u32(seed, n))
    return (np.float32(low) + u * (np.float32(high) - np.float32(low))).astype(np.float32)


def philox_normal(seed: int, n: int, mean: float = 0.0, scale: float = 1.0) -> np.ndarray:
    u = u32_to_unit(philox_u32(seed, 2 * n)).reshape(n, 2)
    return (np.float32(mean) + np.float32(scale) * box_muller(u[:, 0], u[:, 1])).astype(np.float32)


class Philox:
    """A sequential Philox stream (samplers, speculative decoding): ``Philox(seed)``.

    Draws are taken from the same u32 stream as :func:`philox_u32`, so ``Philox(s)``
    reproduces the in-graph ops' bits for ``s``. ``clone`` copies the position.
    """

    def __init__(self, seed: int = 0, offset: int = 0):
        self.seed = int(seed) % 2**64
        self.offset = int(offset)

    def u32(self, n: int) -> np.ndarray:
        out = philox_u32(self.seed, n, self.offset)
        self.offset += n
        return out

    def next_u32(self) -> int:
        return int(self.u32(1)[0])

    def random(self, n: int | None = None):
        """Uniform f32 in [0, 1): one float, or an array of ``n``."""
        u = u32_to_unit(self.u32(1 if n is None else n))
        return float(u[0]) if n is None else u

    def normal(self, n: int | None = None):
        u = u32_to_unit(self.u32(2 * (1 if n is None else n))).reshape(-1, 2)
        z = box_muller(u[:, 0], u[:, 1])
        return float(z[0]) if n is None else z

    def gumbel(self, n: int) -> np.ndarray:
        """Standard Gumbel noise ``-log(-log u)``, u clamped to [1e-6, 1 - 1e-6]."""
        u = np.clip(self.random(n), 1e-6, 1 - 1e-6)
        return -np.log(-np.log(u))

    def clone(self) -> "Philox":
        return Philox(self.seed, self.offset)

    def __repr__(self) -> str:
        return f"Philox(seed={self.seed}, offset={self.offset})"


# --- onnxruntime parity ("ort" mode) -------------------------------------------------
# onnxruntime's CPU RandomUniform/RandomNormal (core/providers/cpu/generator/random.h)
# seed a ``std::default_random_engine`` with ``uint32(seed)`` and draw every element
# with ``std::uniform_real_distribution<T>`` / ``std::normal_distribution<T>``; T is
# float or double, and the float attributes low/high/mean/scale are floats. Its
# Linux wheels are built with libstdc++, whose default engine is ``minstd_rand0``,
# whose ``generate_canonical`` makes one engine call per float and two per double,
# and whose normal distribution is Marsaglia's polar method. The tests check these
# functions against onnxruntime itself on many seeds and sizes.

_MINSTD_A, _MINSTD_M = 16807, 2**31 - 1
_MINSTD_RANGE = _MINSTD_M - 1  # max - min + 1 of the engine's outputs [1, m - 1]


def minstd_rand0(seed: int, n: int) -> np.ndarray:
    """The first ``n`` outputs of C++ ``std::minstd_rand0(seed)`` (int64 array).

    Seeding follows the standard: state ``seed mod (2**31 - 1)``, 0 replaced by 1; each
    call returns ``state = state * 16807 mod (2**31 - 1)``. Computed without a Python
    loop over elements: ``x[i + k] = x[i] * 16807**k mod m`` fills the array in
    doubling blocks (products stay below 2**62).
    """
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    out[0] = (seed % _MINSTD_M or 1) * _MINSTD_A % _MINSTD_M
    filled, mult = 1, _MINSTD_A  # invariant: mult == 16807**filled mod m
    while filled < n:
        block = min(filled, n - filled)
        out[filled:filled + block] = out[:block] * mult % _MINSTD_M
        filled += block
        mult = mult * mult % _MINSTD_M
    return out


def ort_canonical(seed: int, n: int, f64: bool = False) -> np.ndarray:
    """``n`` draws of libstdc++'s ``generate_canonical<float|double>`` on ``minstd_rand0(seed)``.

    float: ``float(g - 1) / float(2**31 - 2)`` (the divisor rounds to exactly 2**31);
    double: ``(double(g0 - 1) + double(g1 - 1) * R) / double(R * R)`` with R = 2**31 - 2.
    A result that rounds up to 1 becomes the largest value below 1, as libstdc++ does.
    """
    if f64:
        g = minstd_rand0(seed, 2 * n).astype(np.float64) - 1
        u = (g[0::2] + g[1::2] * np.float64(_MINSTD_RANGE)) / np.float64(float(_MINSTD_RANGE ** 2))
        below_one = np.nextafter(np.float64(1), np.float64(0))
    else:
        u = (minstd_rand0(seed, n) - 1).astype(np.float32) * np.float32(2.0 ** -31)
        below_one = np.nextafter(np.float32(1), np.float32(0))
    return np.where(u >= 1, below_one, u)


def ort_uniform(seed: int, n: int, low: float = 0.0, high: float = 1.0, f64: bool = False) -> np.ndarray:
    """onnxruntime's RandomUniform for ``seed``: ``u * (high - low) + low`` in float (or double)."""
    dt = np.float64 if f64 else np.float32
    low, high = dt(np.float32(low)), dt(np.float32(high))
    return ort_canonical(seed, n, f64) * (high - low) + low


def ort_normal(seed: int, n: int, mean: float = 0.0, scale: float = 1.0, f64: bool = False) -> np.ndarray:
    """onnxruntime's RandomNormal for ``seed``: libstdc++'s polar method, in float (or double).

    Per accepted pair ``x, y = 2u - 1`` (rejected while ``x*x + y*y`` is 0 or > 1) it
    yields ``y * m`` then ``x * m`` with ``m = sqrt(-2 log(r2) / r2)``; then
    ``z * scale + mean``. The rejection loop is vectorised by drawing pairs in bulk
    and keeping the accepted ones in order, exactly what the sequential loop consumes.
    """
    dt = np.float64 if f64 else np.float32
    pairs = (n + 1) // 2
    drawn = pairs + pairs // 3 + 8  # acceptance is pi/4; doubled below in the rare short case
    while True:
        u = ort_canonical(seed, 2 * drawn, f64).astype(np.float64).reshape(drawn, 2)
        x, y = (2.0 * u[:, 0] - 1.0).astype(dt), (2.0 * u[:, 1] - 1.0).astype(dt)
        r2 = x * x + y * y
        keep = np.flatnonzero((r2 <= 1) & (r2 != 0))
        if len(keep) >= pairs:
            break
        drawn *= 2
    keep = keep[:pairs]
    x, y, r2 = x[keep], y[keep], r2[keep]
    mult = np.sqrt(dt(-2) * _libm_log(r2) / r2)
    z = np.stack([y * mult, x * mult], axis=1).reshape(-1)[:n]
    return z * dt(np.float32(scale)) + dt(np.float32(mean))


def _libm_log(x: np.ndarray) -> np.ndarray:
    """Natural log with the C library's own rounding, as ``std::log`` computes it.

    numpy's SIMD log differs from glibc's ``logf``/``log`` in the last bit for a few
    percent of inputs, so the ort mode calls the C library element by element (one
    call per normal pair). Where no C math library can be loaded the result is
    numpy's f64 log rounded once, which may differ from onnxruntime in the last ulp.
    """
    if x.dtype == np.float64:
        return np.fromiter(map(math.log, x.tolist()), np.float64, len(x))
    logf = _c_logf()
    if logf is None:
        return np.log(x.astype(np.float64)).astype(np.float32)
    return np.fromiter(map(logf, x.tolist()), np.float32, len(x))


@functools.lru_cache(maxsize=None)
def _c_logf():
    """The C library's ``logf`` through ctypes, or None where there is none."""
    name = ctypes.util.find_library("m")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name).logf
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


# --- the fill every rng kernel performs ----------------------------------------------

def draw(options: RngOptions, dist: str, n: int, *, key: int, seed: int | None = None,
         a: float = 0.0, b: float = 1.0, dtype=np.float32) -> np.ndarray:
    """``n`` numbers of an rng node, as a flat array of ``dtype``.

    ``dist`` is ``"uniform"`` (``a, b`` = low, high) or ``"normal"`` (``a, b`` = mean,
    scale). ``seed`` is the node's fixed seed (None: use ``options.seed``). By mode:

    * ``philox``: stream ``combine_seed(seed, key)``, :func:`philox_uniform` /
      :func:`philox_normal` in f32, then rounded to ``dtype`` (f64 outputs therefore
      hold f32 values);
    * ``ort``: onnxruntime's engine seeded with ``seed mod 2**32`` when the node has
      a seed, else ``(options.seed + key) mod 2**32`` (onnxruntime's own fallback is
      its global seed plus the node index); f64 outputs use the double path, other
      dtypes the float path rounded to ``dtype``;
    * ``zero``: zeros.
    """
    dtype = np.dtype(dtype)
    if dist not in ("uniform", "normal"):
        raise RlxError(f"rng distribution must be 'uniform' or 'normal', got {dist!r}")
    if options.mode == "zero":
        return np.zeros(n, dtype)
    if options.mode == "ort":
        engine_seed = (seed if seed is not None else options.seed + key) % 2**32
        fill = ort_uniform if dist == "uniform" else ort_normal
        return fill(engine_seed, n, a, b, f64=dtype == np.float64).astype(dtype)
    stream = combine_seed(seed if seed is not None else options.seed, key)
    fill = philox_uniform if dist == "uniform" else philox_normal
    return fill(stream, n, a, b).astype(dtype)

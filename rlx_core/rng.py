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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import RlxError

__all__ = ["RngOptions", "RNG_MODES", "combine_seed", "philox4x32_10", "philox_blocks", "philox_u32",
           "u32_to_unit", "box_muller", "philox_uniform", "philox_normal", "Philox"]

_MASK32 = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Random123's constants (its known-answer tests pass)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_GOLDEN64 = 0x9E3779B97F4A7C15
_TINY = np.float32(np.finfo(np.float32).tiny)

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


def combine_seed(seed: int, key: int) -> int:
    """The per-node stream seed: ``seed + key * 0x9E3779B97F4A7C15 (mod 2**64)``."""
    return (seed + key * _GOLDEN64) % 2**64


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

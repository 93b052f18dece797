"""GGML's block formats for KV-cache rows: q8_0, q4_0, q5_0 (32 values a block) and f16.

Byte layouts are GGML's (``ggml-common.h``), little-endian, blocks back to back::

    q8_0  d:f16 | qs:i8[32]                                         34 bytes / 32 values
    q4_0  d:f16 | qs:u8[16]                                         18 bytes / 32 values
    q5_0  d:f16 | qh:u32 | qs:u8[16]                                22 bytes / 32 values
    f16   one IEEE half per value                                    2 bytes / value

Nibbles are split-half: byte ``qs[j]`` holds element ``j`` in its low nibble and element
``j + 16`` in its high nibble. q5_0's ``qh`` holds the fifth bit of element ``j`` in bit ``j``.

The quantizers reproduce ggml-quants.c's reference quantizers bit for bit:

* q8_0: ``d = amax / 127``; ``q = roundf(x / d)`` (halves away from zero).
* q4_0: ``m`` = the value of largest magnitude, sign kept (the first such on ties);
  ``d = m / -8``; ``q = min(15, trunc(x / d + 8.5))``.
* q5_0: as q4_0 with ``d = m / -16`` and ``q = min(31, trunc(x / d + 16.5))``.

``x / d`` is ``x * (1 / d)`` in f32, with ``1 / d`` taken as 0 when it is not finite
(``d == 0``, or ``d`` so small that ``1 / d`` overflows; a subnormal ``d`` whose reciprocal
fits is used as GGML uses it); ``d`` is
stored rounded to f16 (nearest even), and dequantization multiplies by that stored f16:
``d * q`` (q8_0), ``d * (q - 8)`` (q4_0), ``d * (q - 16)`` (q5_0). Round-trip error is thus
at most ``|d| / 2`` per value plus the f16 rounding of ``d`` (``|d|`` for the one q4_0/q5_0
value clamped at the top code).

Everything is vectorised numpy over chunks of blocks sized to stay in cache, spread
over one thread per core for large inputs; per-block reductions are a pairwise tree of
strided ufunc calls, since numpy's axis reductions pay a fixed cost for every 32-value row.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError
from .validate import LLMConfigError

__all__ = ["KVFormat", "KV_FORMATS", "F16", "Q8_0", "Q4_0", "Q5_0", "kv_format", "quantize", "dequantize"]

BLOCK = 32
_CHUNK_VALUES = 4096 * BLOCK              # 512 KiB of f32 input per step: stays in L2
_HALF_BELOW = np.float32(np.nextafter(np.float32(0.5), np.float32(0.0)))
_SIGN_BIT = np.uint32(0x80000000)
_TREE_FANS = (8, 4)                       # 8 * 4 = BLOCK values reduce to one
_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)


@dataclass(frozen=True)
class KVFormat:
    """One storage format: ``block_values`` values take ``block_bytes`` bytes."""

    name: str
    block_values: int
    block_bytes: int
    _encode: Callable[[np.ndarray, np.ndarray, "_Scratch"], None]
    _decode: Callable[[np.ndarray], np.ndarray]

    @property
    def bits_per_value(self) -> float:
        return 8.0 * self.block_bytes / self.block_values

    def row_bytes(self, n_values: int) -> int:
        """Bytes of one row of ``n_values`` values (a whole number of blocks)."""
        if n_values % self.block_values:
            raise LLMConfigError(f"{self.name} stores whole blocks of {self.block_values} values; "
                                 f"a row of {n_values} values is not a multiple of {self.block_values}")
        return n_values // self.block_values * self.block_bytes

    def __repr__(self) -> str:
        return f"KVFormat({self.name})"


def kv_format(fmt: "str | KVFormat") -> KVFormat:
    """The format named ``fmt`` (``"q8_0"``, ``"q4_0"``, ``"q5_0"``, ``"f16"``)."""
    if isinstance(fmt, KVFormat):
        return fmt
    try:
        return KV_FORMATS[fmt]
    except (KeyError, TypeError):
        raise LLMConfigError(f"KV format must be one of {', '.join(KV_FORMATS)}, got {fmt!r}") from None


def quantize(x, fmt: "str | KVFormat") -> np.ndarray:
    """Quantize the last axis of ``x`` (f32) into ``fmt``: u8 array ``[..., row_bytes]``."""
    fmt = kv_format(fmt)
    try:
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    except (TypeError, ValueError) as err:
        raise InputError(f"{fmt.name} quantize needs real numbers, got {type(x).__name__}: {err}") from None
    if x.shape[-1] % fmt.block_values:
        raise InputError(f"{fmt.name} quantizes whole blocks of {fmt.block_values} values; the last axis of "
                         f"shape {x.shape} is not a multiple of {fmt.block_values}")
    row = fmt.row_bytes(x.shape[-1])
    groups = x.reshape(-1, fmt.block_values)
    out = np.empty((groups.shape[0], fmt.block_bytes), np.uint8)
    step = _CHUNK_VALUES // fmt.block_values

    def encode(starts: range) -> None:
        scratch = _Scratch(min(step, groups.shape[0]), fmt.block_values)
        for start in starts:
            fmt._encode(groups[start:start + step], out[start:start + step], scratch)

    _run_chunks(groups.shape[0], step, encode)
    return out.reshape(*x.shape[:-1], row)


def dequantize(data, fmt: "str | KVFormat") -> np.ndarray:
    """Inverse of :func:`quantize`: u8 ``[..., row_bytes]`` -> f32 ``[..., n_values]``."""
    fmt = kv_format(fmt)
    data = np.ascontiguousarray(data)
    if data.dtype != np.uint8 or data.ndim == 0 or data.shape[-1] % fmt.block_bytes:
        raise InputError(f"{fmt.name} data must be u8 rows of whole {fmt.block_bytes}-byte blocks, "
                         f"got {data.dtype} of shape {data.shape}")
    blocks = data.reshape(-1, fmt.block_bytes)
    n_values = data.shape[-1] // fmt.block_bytes * fmt.block_values
    out = np.empty((blocks.shape[0], fmt.block_values), np.float32)
    step = _CHUNK_VALUES // fmt.block_values

    def decode(starts: range) -> None:
        for start in starts:
            out[start:start + step] = fmt._decode(blocks[start:start + step])

    _run_chunks(blocks.shape[0], step, decode)
    return out.reshape(*data.shape[:-1], n_values)


# ---------------------------------------------------------------------------------------
# block helpers

_WORKERS = os.cpu_count() or 1
_pool: ThreadPoolExecutor | None = None


def _forget_pool_after_fork() -> None:
    global _pool
    _pool = None                        # a forked child has none of the parent's threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def _run_chunks(n_blocks: int, step: int, work: Callable[[range], None]) -> None:
    """Call ``work`` on the chunk starts ``0, step, 2*step, ...``, dealt out to one worker
    thread per core when there are several chunks (numpy releases the GIL in its loops)."""
    global _pool
    starts = range(0, n_blocks, step)
    workers = min(len(starts), _WORKERS)
    if workers <= 1:
        work(starts)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="rlx-kvquant")
    list(_pool.map(work, [starts[i::workers] for i in range(workers)]))


class _Scratch:
    """Work buffers for one chunk, allocated once per call: fresh multi-100-KiB temporaries
    per chunk would each be a new mmap whose page faults cost more than the arithmetic."""

    def __init__(self, n_blocks: int, block_values: int):
        self.values = np.empty((n_blocks, block_values), np.float32)
        self.codes = np.empty((n_blocks, block_values), np.uint8)
        self.tree = np.empty(n_blocks * (BLOCK // _TREE_FANS[0] + 1), np.float32)
        self._ceilings: dict[int, np.ndarray] = {}

    def fit(self, n_blocks: int):
        """(values, codes) views for a chunk of ``n_blocks`` (the last chunk may be short)."""
        return self.values[:n_blocks], self.codes[:n_blocks]

    def ceiling(self, top: int, n_blocks: int) -> np.ndarray:
        """An array of ``top`` shaped like the codes: numpy's minimum against a scalar takes
        a slow path (about 20x slower than against an array)."""
        if top not in self._ceilings:
            self._ceilings[top] = np.full_like(self.codes, top)
        return self._ceilings[top][:n_blocks]


def _block_reduce(ufunc: np.ufunc, blocks: np.ndarray, tree: np.ndarray) -> np.ndarray:
    """Reduce each row of ``blocks`` ([n, 32], contiguous) with ``ufunc`` in two levels:
    8 strided views, then 4; each step is one ufunc call over all rows at once, written
    into ``tree`` (n * 5 floats). Returns a fresh [n] array."""
    level = blocks.reshape(-1)
    for fan in _TREE_FANS:
        out, tree = tree[:level.size // fan], tree[level.size // fan:]
        ufunc(level[0::fan], level[1::fan], out=out)
        for j in range(2, fan):
            ufunc(out, level[j::fan], out=out)
        level = out
    return level.copy()


def _check_finite(extreme: np.ndarray, fmt: str) -> None:
    # max/min propagate nan, so one look at the per-block extremes covers every value
    if not np.isfinite(extreme).all():
        raise InputError(f"{fmt} quantize got non-finite values (nan or inf) in its input")


def _reciprocal(d: np.ndarray) -> np.ndarray:
    """``1 / d`` in f32, as GGML computes it -- for a subnormal ``d`` too, whose reciprocal is
    an ordinary large float -- and 0 where it is not finite: ``d == 0`` (an all-zero block,
    as in GGML) and ``|d|`` below about ``2**-128``, where ``1 / d`` overflows. GGML then
    converts inf or nan to an integer code (undefined behaviour in C; gguf's port gets
    arbitrary codes); RLX writes code 0 instead. Either way the scale is 0 in f16, so every
    value of such a block dequantizes to 0."""
    with np.errstate(divide="ignore", over="ignore"):
        inv = np.float32(1.0) / d
    inv[~np.isfinite(inv)] = 0
    return inv


def _signed_absmax(blocks: np.ndarray, scratch: _Scratch, fmt: str) -> np.ndarray:
    """Per block, the value of largest magnitude with its sign; the first one when ``+a``
    and ``-a`` both occur -- also for a block of signed zeros (gguf's reference quantizer takes
    the first element of largest magnitude)."""
    hi = _block_reduce(np.maximum, blocks, scratch.tree)
    lo = _block_reduce(np.minimum, blocks, scratch.tree)
    _check_finite(hi, fmt)
    _check_finite(lo, fmt)
    out = np.where(hi >= -lo, hi, lo)
    zeros = np.flatnonzero(out == 0)
    out[zeros] = blocks[zeros, 0]  # a block of (signed) zeros: its first element, sign included
    ties = np.flatnonzero((hi == -lo) & (hi != 0))
    if ties.size:
        first = np.abs(blocks[ties]).argmax(axis=1)
        out[ties] = blocks[ties, first]
    return out


def _store_scale(out: np.ndarray, d: np.ndarray, fmt: str) -> None:
    with np.errstate(over="ignore"):
        half = d.astype(np.float16)
    if not np.isfinite(half).all():
        raise InputError(f"{fmt} block scale {float(np.abs(d).max()):.4g} overflows f16 (max 65504): the "
                         f"input has values too large to quantize")
    out.view(np.uint16)[:, 0] = half.view(np.uint16)       # one strided column: no per-row loop


def _load_scale(blocks: np.ndarray) -> np.ndarray:
    return blocks[:, :2].copy().view(np.float16).astype(np.float32)   # [n, 1]


def _offset_codes(blocks: np.ndarray, scratch: _Scratch, levels: int, fmt: str):
    """q4_0/q5_0: ``d = m / -levels`` and codes ``min(2*levels - 1, trunc(x / d + levels + 0.5))``."""
    d = _signed_absmax(blocks, scratch, fmt) / np.float32(-levels)
    shifted, codes = scratch.fit(blocks.shape[0])
    np.multiply(blocks, _reciprocal(d)[:, None], out=shifted)
    shifted += np.float32(levels + 0.5)                                  # in [0.5, 2*levels + 0.5]
    np.copyto(codes, shifted, casting="unsafe")                          # trunc: values are positive
    np.minimum(codes, scratch.ceiling(2 * levels - 1, blocks.shape[0]), out=codes)
    return d, codes


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[n, 32] codes -> [n, 16] bytes: low nibble element j, high nibble element j + 16.

    Works on u64 words (8 codes each) so the split halves are whole words."""
    words = codes.view(np.uint64).reshape(-1)           # 4 words a block: 2 low-half, 2 high-half
    packed = np.empty((codes.shape[0], 2), np.uint64)
    for w in (0, 1):
        low, high = words[w::4] & _LOW_NIBBLES, words[w + 2::4] & _LOW_NIBBLES
        packed[:, w] = low | (high << np.uint64(4))
    return packed.view(np.uint8)


def _unpack_nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32] codes (inverse of :func:`_pack_nibbles`, top bit excluded)."""
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)


# ---------------------------------------------------------------------------------------
# formats

def _encode_q8_0(blocks: np.ndarray, out: np.ndarray, scratch: _Scratch) -> None:
    scaled, _ = scratch.fit(blocks.shape[0])
    np.abs(blocks, out=scaled)
    amax = _block_reduce(np.maximum, scaled, scratch.tree)
    _check_finite(amax, "q8_0")
    d = amax / np.float32(127)
    # roundf(|x| / d) = trunc(|x| / d + largest f32 below 0.5), exactly, for every f32;
    # the sign goes back on as a bit, and the cast truncates toward zero.
    scaled *= _reciprocal(d)[:, None]
    scaled += _HALF_BELOW
    bits = scaled.view(np.uint32)
    bits |= blocks.view(np.uint32) & _SIGN_BIT
    _store_scale(out, d, "q8_0")
    np.copyto(out[:, 2:].view(np.int8), scaled, casting="unsafe")


def _decode_q8_0(blocks: np.ndarray) -> np.ndarray:
    return _load_scale(blocks) * blocks[:, 2:].view(np.int8)


def _encode_q4_0(blocks: np.ndarray, out: np.ndarray, scratch: _Scratch) -> None:
    d, codes = _offset_codes(blocks, scratch, 8, "q4_0")
    _store_scale(out, d, "q4_0")
    out[:, 2:] = _pack_nibbles(codes)


def _decode_q4_0(blocks: np.ndarray) -> np.ndarray:
    codes = _unpack_nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)
    return _load_scale(blocks) * codes


def _encode_q5_0(blocks: np.ndarray, out: np.ndarray, scratch: _Scratch) -> None:
    d, codes = _offset_codes(blocks, scratch, 16, "q5_0")
    _store_scale(out, d, "q5_0")
    out[:, 2:6] = np.packbits(codes.reshape(-1) >> np.uint8(4), bitorder="little").reshape(-1, 4)
    out[:, 6:] = _pack_nibbles(codes)


def _decode_q5_0(blocks: np.ndarray) -> np.ndarray:
    high = np.unpackbits(blocks[:, 2:6], axis=1, bitorder="little")
    codes = (_unpack_nibbles(blocks[:, 6:]) | (high << np.uint8(4))).astype(np.int8) - np.int8(16)
    return _load_scale(blocks) * codes


def _encode_f16(values: np.ndarray, out: np.ndarray, scratch: _Scratch) -> None:
    with np.errstate(over="ignore"):
        half = values.astype(np.float16)
    if not np.isfinite(half).all():
        raise InputError("f16 quantize got non-finite values or values beyond f16's range (65504)")
    out[:] = half.view(np.uint8)


def _decode_f16(data: np.ndarray) -> np.ndarray:
    return data.view(np.float16).astype(np.float32)


F16 = KVFormat("f16", 1, 2, _encode_f16, _decode_f16)
Q8_0 = KVFormat("q8_0", BLOCK, 34, _encode_q8_0, _decode_q8_0)
Q4_0 = KVFormat("q4_0", BLOCK, 18, _encode_q4_0, _decode_q4_0)
Q5_0 = KVFormat("q5_0", BLOCK, 22, _encode_q5_0, _decode_q5_0)
KV_FORMATS: dict[str, KVFormat] = {f.name: f for f in (F16, Q8_0, Q4_0, Q5_0)}

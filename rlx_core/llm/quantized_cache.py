"""Quantized KV cache: per-layer GGML formats, rows appended and gathered by token, and
an opt-in file-backed mode for histories larger than the RAM budget.

Each layer stores K and V as rows of ``kv_dim`` values (all KV heads of one token),
each row quantized independently in the layer's format (:mod:`.kvquant`: q8_0, q4_0,
q5_0 or f16), rows back to back. In memory the buffers grow by doubling. With a
``path`` the rows live in a file ``[K region | V region]`` of fixed ``capacity`` rows,
written and read with ``pwrite``/``pread`` (no mapping), so resident memory stays at about
one chunk while the page cache -- or the disk, under memory pressure -- holds the history.
:meth:`QuantizedKVLayer.attend` streams attention over the history chunk by chunk.

The file holds prompts' K/V, and other processes can reach files: it is created 0600,
exclusively and never through a link (``O_CREAT|O_EXCL|O_NOFOLLOW``), in a folder that
only this user may write (``rlx_core.runtime.safefs``; created 0700 when missing). A link
or another user's file at the path is refused (:class:`UntrustedPathError`); a file of
this user's is replaced. A file truncated underneath gives a short read, i.e. a
:class:`CacheError`, never a SIGBUS; and every page of :data:`PAGE_ROWS` rows has a
CRC-32 kept in memory and checked on each read, so rows changed underneath (an inf/nan
block scale) raise a :class:`CacheError` instead of dequantizing silently.
"""
from __future__ import annotations

import math
import os
import zlib
from typing import Iterator, Sequence

import numpy as np

from ..errors import CacheError, InputError, KVCacheFullError
from ..runtime.safefs import UntrustedPathError, create_exclusive, file_problem, private_dir
from .kvquant import KVFormat, dequantize, kv_format, quantize
from .validate import LLMConfigError, check_int

__all__ = ["QuantizedKVLayer", "QuantizedKVCache"]

_DEFAULT_CHUNK = 4096
PAGE_ROWS = 64  # rows (per region) covered by one checksum: reads are widened to whole pages


class _MemoryRows:
    """K and V row buffers in RAM, grown by doubling."""

    def __init__(self, row_bytes: int, capacity: int | None):
        self.row_bytes, self.capacity = row_bytes, capacity
        self.k = np.empty((0, row_bytes), np.uint8)
        self.v = np.empty((0, row_bytes), np.uint8)

    def write(self, start: int, k: np.ndarray, v: np.ndarray) -> None:
        stop = start + k.shape[0]
        if stop > self.k.shape[0]:
            grown = max(stop, 2 * self.k.shape[0], 16)
            grown = grown if self.capacity is None else min(grown, self.capacity)
            for name in ("k", "v"):
                old = getattr(self, name)
                new = np.empty((grown, self.row_bytes), np.uint8)
                new[:start] = old[:start]
                setattr(self, name, new)
        self.k[start:stop] = k
        self.v[start:stop] = v

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        return self.k[start:stop], self.v[start:stop]

    def close(self) -> None:
        pass


class _FileRows:
    """K and V rows in a file ``[K: capacity rows | V: capacity rows]``; see the module docstring."""

    def __init__(self, path: str | os.PathLike, row_bytes: int, capacity: int):
        self.row_bytes, self.capacity, self.path = row_bytes, capacity, os.fspath(path)
        self.size = 2 * capacity * row_bytes
        self._fd = _create_private(self.path)
        try:
            os.ftruncate(self._fd, self.size)
        except BaseException:
            os.close(self._fd)
            raise
        self._crc = np.zeros((2, -(-capacity // PAGE_ROWS)), np.uint32)  # CRC-32 of each page's rows so far
        self._written = 0

    def write(self, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Rows ``start ..`` (appended: ``start`` is the number of rows written so far)."""
        fd = self._open_fd()
        if os.fstat(fd).st_size < self.size:
            raise self._truncated(os.fstat(fd).st_size)
        for region, rows in enumerate((k, v)):
            rows = np.ascontiguousarray(rows, np.uint8)
            _write_at(fd, rows, (region * self.capacity + start) * self.row_bytes)
            row = start
            while row < start + rows.shape[0]:  # extend each page's CRC with its new rows
                page = row // PAGE_ROWS
                end = min(start + rows.shape[0], (page + 1) * PAGE_ROWS)
                self._crc[region, page] = zlib.crc32(rows[row - start:end - start], int(self._crc[region, page]))
                row = end
        self._written = max(self._written, start + k.shape[0])

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[start, stop)`` of K and V, each page they touch checked against its CRC."""
        fd = self._open_fd()
        lo, hi = start // PAGE_ROWS * PAGE_ROWS, min(-(-stop // PAGE_ROWS) * PAGE_ROWS, self._written)
        out = []
        for region in (0, 1):
            if hi <= lo:
                out.append(np.empty((0, self.row_bytes), np.uint8))
                continue
            data = _read_at(fd, (hi - lo) * self.row_bytes, (region * self.capacity + lo) * self.row_bytes)
            if len(data) < (hi - lo) * self.row_bytes:
                raise self._truncated(os.fstat(fd).st_size)
            rows = np.frombuffer(data, np.uint8).reshape(hi - lo, self.row_bytes)
            for first in range(lo, hi, PAGE_ROWS):
                page = first // PAGE_ROWS
                if zlib.crc32(rows[first - lo:first - lo + PAGE_ROWS]) != self._crc[region, page]:
                    last = min(first + PAGE_ROWS, self._written) - 1
                    raise CacheError(f"quantized KV file {self.path}: {'KV'[region]} rows {first}..{last} do not "
                                     f"match their checksum (the file was changed underneath)")
            out.append(rows[start - lo:stop - lo])
        return out[0], out[1]

    def _open_fd(self) -> int:
        if self._fd is None:
            raise CacheError(f"quantized KV file {self.path} is closed")
        return self._fd

    def _truncated(self, size: int) -> CacheError:
        return CacheError(f"quantized KV file {self.path} is {size} bytes, expected {self.size}: "
                          f"it was truncated underneath")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _create_private(path: str) -> int:
    """A new 0600 file at ``path`` (see the module docstring); raises UntrustedPathError."""
    folder = private_dir(os.path.dirname(os.path.abspath(path)))
    try:
        problem = file_problem(path)
    except FileNotFoundError:
        problem = None
    else:
        if problem:
            raise UntrustedPathError(f"refusing the quantized KV file {path}: it {problem}")
        os.unlink(path)  # this user's own file (a previous run's): replaced, never written through
    try:
        return create_exclusive(path)
    except FileExistsError:
        raise UntrustedPathError(f"refusing the quantized KV file {path}: something was put there while "
                                 f"creating it in {folder}") from None


def _read_at(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes from ``offset`` (fewer only at the end of the file)."""
    parts, done = [], 0
    while done < size:
        if hasattr(os, "pread"):
            part = os.pread(fd, size - done, offset + done)
        else:  # Windows: a layer is used from one thread at a time
            os.lseek(fd, offset + done, os.SEEK_SET)
            part = os.read(fd, size - done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def _write_at(fd: int, data: np.ndarray, offset: int) -> None:
    view = memoryview(data).cast("B")
    while view:
        if hasattr(os, "pwrite"):
            written = os.pwrite(fd, view, offset)
        else:
            os.lseek(fd, offset, os.SEEK_SET)
            written = os.write(fd, view)
        view, offset = view[written:], offset + written


class QuantizedKVLayer:
    """One layer's K and V rows in one format; see the module docstring."""

    def __init__(self, kv_dim: int, fmt: "str | KVFormat" = "q8_0", capacity: int | None = None,
                 path: str | os.PathLike | None = None):
        self.kv_dim = check_int("kv_dim", kv_dim, 1)
        self.format = kv_format(fmt)
        self.row_bytes = self.format.row_bytes(self.kv_dim)
        self.capacity = None if capacity is None else check_int("capacity", capacity, 1)
        if path is not None and self.capacity is None:
            raise LLMConfigError("a file-backed KV layer needs a capacity (rows to size the file for)")
        self._rows = _MemoryRows(self.row_bytes, self.capacity) if path is None else \
            _FileRows(path, self.row_bytes, self.capacity)
        self.num_tokens = 0

    @property
    def nbytes(self) -> int:
        """Bytes of K and V rows held (what the history costs in this format)."""
        return 2 * self.num_tokens * self.row_bytes

    @property
    def path(self) -> str | None:
        return getattr(self._rows, "path", None)

    def append(self, k, v) -> None:
        """Append ``n`` tokens' rows: ``k``, ``v`` of shape ``[n, kv_dim]`` or ``[n, heads, head_dim]``."""
        k, v = self._as_rows("k", k), self._as_rows("v", v)
        if k.shape != v.shape:
            raise InputError(f"k and v must hold the same tokens, got {k.shape[0]} and {v.shape[0]} rows")
        if self.capacity is not None and self.num_tokens + k.shape[0] > self.capacity:
            raise KVCacheFullError(f"quantized KV layer full: {self.num_tokens} of {self.capacity} rows used, "
                                   f"{k.shape[0]} more requested")
        self._rows.write(self.num_tokens, quantize(k, self.format), quantize(v, self.format))
        self.num_tokens += k.shape[0]

    def read(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Dequantized K, V ``[stop - start, kv_dim]`` (f32) for tokens ``start .. stop-1``."""
        stop = self.num_tokens if stop is None else stop
        if not 0 <= start <= stop <= self.num_tokens:
            raise InputError(f"token range [{start}, {stop}) is outside the {self.num_tokens} cached tokens")
        k, v = self._rows.read(start, stop)
        return dequantize(k, self.format), dequantize(v, self.format)

    def gather(self, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Dequantized K, V rows for arbitrary token ``positions``."""
        positions = np.asarray(positions, np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.num_tokens):
            raise InputError(f"token positions must be in [0, {self.num_tokens}), got "
                             f"{positions.min()}..{positions.max()}")
        lo, hi = (int(positions.min()), int(positions.max()) + 1) if positions.size else (0, 0)
        k, v = self._rows.read(lo, hi)
        return dequantize(k[positions - lo], self.format), dequantize(v[positions - lo], self.format)

    def chunks(self, chunk_tokens: int = _DEFAULT_CHUNK) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(start, k, v)`` for consecutive chunks of the history, dequantized."""
        chunk_tokens = check_int("chunk_tokens", chunk_tokens, 1)
        for start in range(0, self.num_tokens, chunk_tokens):
            yield (start, *self.read(start, min(start + chunk_tokens, self.num_tokens)))

    def attend(self, q, num_heads: int, scale: float | None = None,
               chunk_tokens: int = _DEFAULT_CHUNK) -> np.ndarray:
        """Single-query attention of ``q [num_heads, head_dim]`` over the whole history
        (grouped-query: ``num_heads`` a multiple of the layer's KV heads), one chunk at a
        time with a running (online) softmax; f32 ``[num_heads, head_dim]``."""
        q = np.asarray(q, np.float32)
        num_heads = check_int("num_heads", num_heads, 1)
        if q.ndim != 2 or q.shape[0] != num_heads or self.kv_dim % q.shape[1]:
            raise InputError(f"q must be [num_heads={num_heads}, head_dim] with head_dim dividing kv_dim "
                             f"{self.kv_dim}, got {q.shape}")
        head_dim = q.shape[1]
        kv_heads = self.kv_dim // head_dim
        if num_heads % kv_heads:
            raise InputError(f"num_heads {num_heads} must be a multiple of the {kv_heads} KV heads")
        scale = 1 / math.sqrt(head_dim) if scale is None else float(scale)
        grouped = q.reshape(kv_heads, num_heads // kv_heads, head_dim) * np.float32(scale)
        peak = np.full(grouped.shape[:2], -np.inf)            # running max, sum and output: f64
        total = np.zeros(grouped.shape[:2])
        acc = np.zeros(grouped.shape)
        for _, k, v in self.chunks(chunk_tokens):
            k = k.reshape(-1, kv_heads, head_dim).transpose(1, 2, 0)          # [kv_heads, head_dim, t]
            v = v.reshape(-1, kv_heads, head_dim).transpose(1, 0, 2)          # [kv_heads, t, head_dim]
            scores = grouped @ k                                              # f32 [kv_heads, group, t]
            new_peak = np.maximum(peak, scores.max(axis=-1))
            weights = np.exp(scores - new_peak[..., None].astype(np.float32))
            rescale = np.exp(peak - new_peak)
            total = total * rescale + weights.sum(axis=-1, dtype=np.float64)
            acc = acc * rescale[..., None] + weights @ v
            peak = new_peak
        if not self.num_tokens:
            return np.zeros((num_heads, head_dim), np.float32)
        return (acc / total[..., None]).reshape(num_heads, head_dim).astype(np.float32)

    def close(self) -> None:
        """Close a file-backed layer (the file stays)."""
        self._rows.close()

    def _as_rows(self, name: str, x) -> np.ndarray:
        x = np.asarray(x, np.float32)
        if x.ndim < 1 or math.prod(x.shape[1:]) != self.kv_dim:
            raise InputError(f"{name} must be [tokens, kv_dim={self.kv_dim}] (or [tokens, heads, head_dim]), "
                             f"got {x.shape}")
        return x.reshape(x.shape[0], self.kv_dim)


class QuantizedKVCache:
    """One :class:`QuantizedKVLayer` per layer; ``formats`` is one format for all layers
    or one per layer; with ``directory``, layer ``i`` is file-backed in ``kv_{i}.bin``."""

    def __init__(self, num_layers: int, kv_dim: int, formats: "str | KVFormat | Sequence" = "q8_0",
                 capacity: int | None = None, directory: str | os.PathLike | None = None):
        num_layers = check_int("num_layers", num_layers, 1)
        if isinstance(formats, (str, KVFormat)):
            formats = [formats] * num_layers
        formats = list(formats)
        if len(formats) != num_layers:
            raise LLMConfigError(f"formats must name one format or one per layer ({num_layers}), got {len(formats)}")
        if directory is not None:
            private_dir(directory)
        self.layers = [QuantizedKVLayer(kv_dim, fmt, capacity,
                                        None if directory is None else os.path.join(directory, f"kv_{i}.bin"))
                       for i, fmt in enumerate(formats)]

    def __getitem__(self, layer: int) -> QuantizedKVLayer:
        return self.layers[layer]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def num_tokens(self) -> int:
        return self.layers[0].num_tokens

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    def close(self) -> None:
        for layer in self.layers:
            layer.close()

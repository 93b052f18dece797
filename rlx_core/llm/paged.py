"""Paged KV cache: block tables per sequence over a shared block pool, copy-on-write
forks, prefix caching, and the K/V tensors themselves.

:class:`BlockManager` is the bookkeeping (what a scheduler needs): each sequence has a
block table (its blocks, in order) and the token ids whose K/V it holds; token ``t``
lives in slot ``table[t // block_size] * block_size + t % block_size``.

* ``reserve(seq, tokens)`` appends tokens, allocating blocks as needed, and returns their
  slots. It is all-or-nothing: if the pool cannot supply the blocks it raises
  :class:`~rlx_core.errors.KVCacheFullError` and changes nothing.
* ``fork(parent, child)`` shares every block (reference counts +1). Full blocks are
  never written again, so only a shared, partly filled last block needs a private copy,
  made on the next ``reserve`` of either sequence (copy-on-write); ``reserve`` reports
  such copies for the tensor store to carry out.
* With prefix caching, each block that fills up is registered under its chained hash;
  ``match_prefix`` lets a new sequence start on the cached blocks of its prompt's longest
  cached prefix (never the whole prompt: the last token is always computed, as in vLLM,
  since its logits are needed).

:class:`PagedKVCache` adds the tensors, ``[layers, num_blocks * block_size, kv_heads,
head_dim]`` for K and for V, and gathers a sequence's K/V into the dense layout an
attention kernel takes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import numpy as np

from ..errors import DTypeError, InputError, KVCacheFullError
from ..ir.dtypes import DType
from .blocks import BLOCK_OVERHEAD_BYTES, BlockPool, KVBlock, block_hash
from .candidates import is_real_dtype
from .validate import KVSlotError, LLMConfigError, check_hashable, check_host_memory, check_int

__all__ = ["BlockManager", "PagedKVCache"]


@dataclass
class _Sequence:
    blocks: list[KVBlock] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)      # one per full block
    extra_key: bytes | None = None


class BlockManager:
    """Block tables of all sequences over one :class:`BlockPool`."""

    def __init__(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True):
        self.block_size = check_int("block_size", block_size, 1)
        self.pool = BlockPool(num_blocks, prefix_caching)
        self._seqs: dict[Hashable, _Sequence] = {}

    # -- sequences -------------------------------------------------------------------------

    def add_sequence(self, seq_id: Hashable, extra_key: bytes | str | None = None) -> None:
        """Start an empty sequence; ``extra_key`` (e.g. an adapter name or cache salt)
        keeps its prefix-cache entries apart from sequences with another key."""
        if check_hashable("sequence id", seq_id) in self._seqs:
            raise InputError(f"sequence {seq_id!r} already exists")
        if isinstance(extra_key, str):
            extra_key = extra_key.encode()
        self._seqs[seq_id] = _Sequence(extra_key=extra_key)

    def free(self, seq_id: Hashable) -> None:
        """Release a sequence's blocks (tail first, so its tail is evicted first)."""
        seq = self._seqs.pop(self._require(seq_id))
        self.pool.free(reversed(seq.blocks))

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """``child`` shares all of ``parent``'s blocks (copy-on-write)."""
        parent = self._seqs[self._require(parent_id)]
        if check_hashable("child sequence id", child_id) in self._seqs:
            raise InputError(f"cannot fork into sequence {child_id!r}: it already exists")
        self.pool.touch(parent.blocks)
        self._seqs[child_id] = _Sequence(list(parent.blocks), list(parent.tokens), list(parent.hashes),
                                         parent.extra_key)

    def match_prefix(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Attach the cached blocks of the longest cached prefix of ``tokens`` (at most
        ``len(tokens) - 1`` tokens) to the empty sequence ``seq_id``; returns how many
        tokens that covers -- their K/V need not be computed again."""
        seq = self._seqs[self._require(seq_id)]
        if seq.tokens:
            raise InputError(f"match_prefix needs an empty sequence; {seq_id!r} holds {len(seq.tokens)} tokens")
        tokens = _token_list(tokens)
        size, parent, hits = self.block_size, None, []
        for start in range(0, (len(tokens) - 1) // size * size, size):
            digest = block_hash(parent, tokens[start:start + size], seq.extra_key if start == 0 else None)
            block = self.pool.lookup(digest)
            if block is None:
                break
            hits.append((block, digest))
            parent = digest
        self.pool.touch(block for block, _ in hits)
        seq.blocks = [block for block, _ in hits]
        seq.hashes = [digest for _, digest in hits]
        seq.tokens = tokens[:len(hits) * size]
        return len(seq.tokens)

    # -- appending -------------------------------------------------------------------------

    def blocks_needed(self, seq_id: Hashable, n_tokens: int) -> int:
        """Free blocks that ``reserve(seq_id, n_tokens tokens)`` would take."""
        seq = self._seqs[self._require(seq_id)]
        return self._copy_needed(seq, n_tokens) + self._new_blocks(seq, n_tokens)

    def reserve(self, seq_id: Hashable, tokens: Sequence[int]) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """Append ``tokens`` to a sequence: returns their slots (i64) and the copy-on-write
        block copies ``(src, dst)`` to apply to the K/V store before writing."""
        seq = self._seqs[self._require(seq_id)]
        tokens = _token_list(tokens)
        needed = self.blocks_needed(seq_id, len(tokens))
        if needed > self.pool.num_free:
            raise KVCacheFullError(
                f"KV cache full: sequence {seq_id!r} needs {needed} more block(s) of {self.block_size} tokens "
                f"for {len(tokens)} token(s), but {self.pool.num_free} of {self.pool.num_blocks} are free; "
                f"free or preempt a sequence first (nothing was changed)")
        copies = []
        if self._copy_needed(seq, len(tokens)):
            shared = seq.blocks[-1]
            private = self.pool.allocate(1)[0]
            self.pool.free([shared])
            seq.blocks[-1] = private
            copies.append((shared.block_id, private.block_id))
        seq.blocks.extend(self.pool.allocate(self._new_blocks(seq, len(tokens))))
        start = len(seq.tokens)
        seq.tokens.extend(tokens)
        self._register_full_blocks(seq)
        return self._slots(seq, start, len(seq.tokens)), copies

    # -- queries ---------------------------------------------------------------------------

    def __contains__(self, seq_id) -> bool:
        return check_hashable("sequence id", seq_id) in self._seqs

    @property
    def sequences(self) -> list:
        return list(self._seqs)

    def num_tokens(self, seq_id: Hashable) -> int:
        return len(self._seqs[self._require(seq_id)].tokens)

    def tokens(self, seq_id: Hashable) -> list[int]:
        return list(self._seqs[self._require(seq_id)].tokens)

    def block_table(self, seq_id: Hashable) -> list[int]:
        return [block.block_id for block in self._seqs[self._require(seq_id)].blocks]

    def slots(self, seq_id: Hashable) -> np.ndarray:
        """Slots of all the sequence's tokens, in order."""
        seq = self._seqs[self._require(seq_id)]
        return self._slots(seq, 0, len(seq.tokens))

    # -- internals -------------------------------------------------------------------------

    def _require(self, seq_id):
        if check_hashable("sequence id", seq_id) not in self._seqs:
            raise InputError(f"unknown sequence {seq_id!r}")
        return seq_id

    def _copy_needed(self, seq: _Sequence, n_tokens: int) -> int:
        """1 if the next token lands in a partly filled block that is shared."""
        partial = len(seq.tokens) % self.block_size
        return int(n_tokens > 0 and partial > 0 and seq.blocks[-1].ref_count > 1)

    def _new_blocks(self, seq: _Sequence, n_tokens: int) -> int:
        return -(-(len(seq.tokens) + n_tokens) // self.block_size) - len(seq.blocks)

    def _slots(self, seq: _Sequence, start: int, stop: int) -> np.ndarray:
        positions = np.arange(start, stop)
        table = np.fromiter((b.block_id for b in seq.blocks), np.int64, len(seq.blocks))
        return table[positions // self.block_size] * self.block_size + positions % self.block_size

    def _register_full_blocks(self, seq: _Sequence) -> None:
        size = self.block_size
        for index in range(len(seq.hashes), len(seq.tokens) // size):
            parent = seq.hashes[-1] if seq.hashes else None
            digest = block_hash(parent, seq.tokens[index * size:(index + 1) * size],
                                seq.extra_key if index == 0 else None)
            seq.hashes.append(digest)
            self.pool.register(seq.blocks[index], digest)


def _token_list(tokens: Sequence[int]) -> list[int]:
    array = np.asarray(tokens)
    if array.ndim != 1 or (array.size and (array.dtype.kind not in "iu" or array.min() < 0)):
        raise InputError(f"tokens must be a 1-D sequence of non-negative integer ids, got {array.dtype} "
                         f"of shape {array.shape}")
    return array.astype(np.int64).tolist()


class PagedKVCache:
    """K and V of every layer in pooled blocks, with a :class:`BlockManager`.

    The pool's size is checked against the host's memory before anything is allocated
    (:class:`~rlx_core.llm.validate.KVCacheMemoryError`, naming the bytes); slots given to
    :meth:`write` must lie in the pool (:class:`~rlx_core.llm.validate.KVSlotError`: a
    negative slot would wrap around into another sequence's K/V)."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, num_blocks: int, block_size: int = 16,
                 dtype="f32", prefix_caching: bool = True):
        self.num_layers = check_int("num_layers", num_layers, 1)
        self.num_kv_heads = check_int("num_kv_heads", num_kv_heads, 1)
        self.head_dim = check_int("head_dim", head_dim, 1)
        self.dtype = _storage_dtype(dtype)
        num_blocks, block_size = check_int("num_blocks", num_blocks, 1), check_int("block_size", block_size, 1)
        shape = (self.num_layers, num_blocks * block_size, self.num_kv_heads, self.head_dim)
        tensor_bytes = 2 * math.prod(shape) * self.dtype.itemsize
        check_host_memory(f"a paged KV cache of {num_blocks} blocks x {block_size} tokens x {self.num_layers} layers "
                          f"x {self.num_kv_heads} heads x {self.head_dim} ({np.dtype(self.dtype).name}, K and V)",
                          tensor_bytes + num_blocks * BLOCK_OVERHEAD_BYTES)
        self.manager = BlockManager(num_blocks, block_size, prefix_caching)
        self.k = np.zeros(shape, self.dtype)
        self.v = np.zeros(shape, self.dtype)

    @property
    def block_size(self) -> int:
        return self.manager.block_size

    def add_sequence(self, seq_id: Hashable, extra_key: bytes | str | None = None) -> None:
        self.manager.add_sequence(seq_id, extra_key)

    def match_prefix(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        return self.manager.match_prefix(seq_id, tokens)

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        self.manager.fork(parent_id, child_id)

    def free(self, seq_id: Hashable) -> None:
        self.manager.free(seq_id)

    def reserve(self, seq_id: Hashable, tokens: Sequence[int]) -> np.ndarray:
        """Slots for ``tokens`` (copy-on-write copies already done); write them with :meth:`write`."""
        slots, copies = self.manager.reserve(seq_id, tokens)
        size = self.block_size
        for src, dst in copies:
            for store in (self.k, self.v):
                store[:, dst * size:(dst + 1) * size] = store[:, src * size:(src + 1) * size]
        return slots

    def write(self, layer: int, slots, k, v) -> None:
        """Store one layer's ``k``, ``v`` ``[n, kv_heads, head_dim]`` at ``slots`` (from
        :meth:`reserve`); nothing is written unless every argument is valid."""
        check_int("layer", layer, 0, self.num_layers - 1)
        slots = self._check_slots(slots)
        for name, value in (("k", k), ("v", v)):
            self._check_rows(name, value, (slots.size, self.num_kv_heads, self.head_dim))
        self.k[layer, slots] = k
        self.v[layer, slots] = v

    def append(self, seq_id: Hashable, tokens: Sequence[int], k, v) -> np.ndarray:
        """Reserve ``tokens`` and store all layers' ``k``, ``v`` ``[layers, n, kv_heads, head_dim]``."""
        shape = (self.num_layers, len(tokens), self.num_kv_heads, self.head_dim)
        for name, value in (("k", k), ("v", v)):
            self._check_rows(name, value, shape)
        slots = self.reserve(seq_id, tokens)
        self.k[:, slots] = k
        self.v[:, slots] = v
        return slots

    def gather(self, seq_id: Hashable, layer: int, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One sequence's K and V for ``layer``, tokens ``0 .. length-1`` (default: all):
        ``[tokens, kv_heads, head_dim]`` each."""
        slots = self._slots(seq_id, length, layer)
        return self.k[layer, slots], self.v[layer, slots]

    def gather_batch(self, seq_ids: Sequence[Hashable], layer: int, lengths: Sequence[int] | None = None,
                     width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """K, V ``[batch, kv_heads, width, head_dim]`` (the layout of
        ``scaled_dot_product_attention`` and of the ``attention`` op), zero padded past
        each sequence's length, and the lengths ``[batch]``. ``lengths`` limits each
        sequence to its first tokens; ``width`` (default: the longest) fixes the padded
        size, e.g. for a graph compiled for a maximum context."""
        lengths = [None] * len(seq_ids) if lengths is None else list(lengths)
        if len(lengths) != len(seq_ids):
            raise InputError(f"gather_batch got {len(lengths)} lengths for {len(seq_ids)} sequences")
        slot_lists = [self._slots(s, n, layer) for s, n in zip(seq_ids, lengths)]
        sizes = np.array([s.size for s in slot_lists], np.int64)
        longest = int(sizes.max(initial=0))
        width = longest if width is None else check_int("gather_batch width", width, longest)
        k = np.zeros((len(seq_ids), width, self.num_kv_heads, self.head_dim), self.dtype)
        v = np.zeros_like(k)
        for row, slots in enumerate(slot_lists):
            k[row, :slots.size] = self.k[layer, slots]
            v[row, :slots.size] = self.v[layer, slots]
        return k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), sizes

    def block_tables(self, seq_ids: Sequence[Hashable]) -> np.ndarray:
        """Block ids per sequence, ``[batch, max_blocks]`` i32 padded with -1 (the input of
        a paged attention kernel)."""
        tables = [self.manager.block_table(s) for s in seq_ids]
        out = np.full((len(tables), max((len(t) for t in tables), default=0)), -1, np.int32)
        for row, table in enumerate(tables):
            out[row, :len(table)] = table
        return out

    def _slots(self, seq_id: Hashable, length: int | None, layer: int = 0) -> np.ndarray:
        check_int("layer", layer, 0, self.num_layers - 1)
        slots = self.manager.slots(seq_id)
        if length is None:
            return slots
        return slots[:check_int(f"length of sequence {seq_id!r}", length, 0, slots.size)]

    def _check_rows(self, name: str, value, shape: tuple) -> None:
        value = np.asarray(value)
        if value.shape != shape or not is_real_dtype(value.dtype):
            raise InputError(f"{name} must be real numbers of shape {shape} (layers/tokens, kv_heads, head_dim), "
                             f"got {value.dtype} of shape {value.shape}")

    def _check_slots(self, slots) -> np.ndarray:
        slots = np.asarray(slots)
        if slots.size == 0:
            return slots.reshape(0).astype(np.int64)
        if slots.ndim != 1 or slots.dtype.kind not in "iu":
            raise KVSlotError(f"slots must be a 1-D array of integer slot indices (from reserve), got {slots.dtype} "
                              f"of shape {slots.shape}")
        capacity = self.k.shape[1]
        outside = (slots < 0) | (slots >= capacity)
        if outside.any():
            raise KVSlotError(f"slot {slots[outside][0]} is outside the pool's {capacity} slots (0 .. {capacity - 1}: "
                              f"{self.manager.pool.num_blocks} blocks of {self.block_size}); nothing was written")
        return slots


def _storage_dtype(dtype) -> np.dtype:
    try:
        dt = DType.of(dtype)
    except DTypeError:
        dt = None
    if dt not in (DType.F32, DType.F16, DType.BF16):
        raise LLMConfigError(f"KV cache dtype must be f32, f16 or bf16, got {dtype!r}")
    return dt.np

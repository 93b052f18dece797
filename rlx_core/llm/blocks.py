"""The KV block pool: reference-counted blocks, an LRU free list, and prefix-cache hashes.

Follows vLLM's ``BlockPool`` (``vllm/v1/core/block_pool.py``): a block in use by ``n``
sequences has ``ref_count == n``. At 0 a cached block (a full block with a hash) joins
the tail of the free list but keeps its contents and hash, so a later sequence with the
same prefix can revive it (``touch``) until allocation evicts it from the head -- least
recently freed first. A freed block without a hash (a partly filled one, or any block
when prefix caching is off) can never be hit, so it goes to the head and is reused
first, before any cached block is evicted. A full block's hash chains its parent's
hash, its token ids and (first block only) an extra key such as an adapter name, so
equal hashes mean equal prefixes; several blocks may hold the same prefix (two
sequences that computed it at once), and all of them stay findable, the first
registered answering lookups.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..errors import KVCacheFullError
from .validate import LLMStateError, check_int, check_host_memory

__all__ = ["KVBlock", "FreeBlockQueue", "BlockPool", "block_hash"]

_ROOT = b"rlx-kv-prefix-root"
BLOCK_OVERHEAD_BYTES = 160     # a KVBlock object and its list slot, with room to spare


def block_hash(parent: bytes | None, tokens: Sequence[int], extra_key: bytes | None = None) -> bytes:
    """128-bit BLAKE2b of (parent hash, token ids as i64, extra key)."""
    h = hashlib.blake2b(parent if parent is not None else _ROOT, digest_size=16)
    h.update(np.asarray(tokens, np.int64).tobytes())
    if extra_key is not None:
        h.update(b"\x00extra\x00" + extra_key)
    return h.digest()


class KVBlock:
    """One block of ``block_size`` token slots."""

    __slots__ = ("block_id", "ref_count", "block_hash", "prev_free", "next_free")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: bytes | None = None
        self.prev_free: KVBlock | None = None
        self.next_free: KVBlock | None = None

    def __repr__(self) -> str:
        cached = ", cached" if self.block_hash is not None else ""
        return f"KVBlock({self.block_id}, refs={self.ref_count}{cached})"


class FreeBlockQueue:
    """Free blocks in a doubly linked list through the blocks themselves: O(1) pop from
    the head, append at the tail and removal from the middle, with no allocation."""

    def __init__(self, blocks: Iterable[KVBlock]):
        self._head, self._tail = KVBlock(-1), KVBlock(-1)
        self._head.next_free, self._tail.prev_free = self._tail, self._head
        self._len = 0
        for block in blocks:
            self.append(block)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head.next_free
        while block is not self._tail:
            yield block
            block = block.next_free

    def popleft(self) -> KVBlock:
        block = self._head.next_free
        if block is self._tail:
            raise KVCacheFullError("the free block list is empty")
        self.remove(block)
        return block

    def append(self, block: KVBlock) -> None:
        self._link(block, self._tail.prev_free, self._tail)

    def prepend_n(self, blocks: Iterable[KVBlock]) -> None:
        """Put ``blocks`` at the head, in the order given (the first is popped first)."""
        after = self._head
        for block in blocks:
            self._link(block, after, after.next_free)
            after = block

    def _link(self, block: KVBlock, before: KVBlock, after: KVBlock) -> None:
        block.prev_free, block.next_free = before, after
        before.next_free = after.prev_free = block
        self._len += 1

    def remove(self, block: KVBlock) -> None:
        block.prev_free.next_free, block.next_free.prev_free = block.next_free, block.prev_free
        block.prev_free = block.next_free = None
        self._len -= 1


class BlockPool:
    """``num_blocks`` blocks with reference counts, free list and prefix-cache map."""

    def __init__(self, num_blocks: int, prefix_caching: bool = True):
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        check_host_memory(f"a block pool of {self.num_blocks} blocks (bookkeeping alone)",
                          self.num_blocks * BLOCK_OVERHEAD_BYTES)
        self.prefix_caching = bool(prefix_caching)
        self.blocks = [KVBlock(i) for i in range(self.num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached: dict[bytes, dict[int, KVBlock]] = {}      # hash -> {block id: block}

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones included: they can be evicted)."""
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[KVBlock]:
        """``n`` fresh blocks (ref count 1), taken from the head of the free list, their cache
        entries evicted; KVCacheFullError -- and nothing taken -- if fewer are free."""
        if n > self.num_free:
            raise KVCacheFullError(f"KV cache full: {n} block(s) needed, {self.num_free} of "
                                   f"{self.num_blocks} free")
        out = []
        for _ in range(n):
            block = self.free_queue.popleft()
            self._evict(block)
            block.ref_count = 1
            out.append(block)
        return out

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference per occurrence in ``blocks``. Those reaching 0 join the free list
        in the order given (pass a sequence's blocks tail first: its tail goes first): blocks
        without a hash at the head, cached ones at the tail (vLLM's order). Freeing a block
        more often than it is held, or a block of another pool, is an LLMStateError and
        changes nothing."""
        blocks = self._own(blocks, "free")
        uses: dict[int, int] = {}
        for block in blocks:
            uses[block.block_id] = uses.get(block.block_id, 0) + 1
        for block in blocks:
            if uses[block.block_id] > block.ref_count:
                raise LLMStateError(
                    f"block {block.block_id} freed {uses[block.block_id]} time(s) but held by "
                    f"{block.ref_count} sequence(s): a double free (nothing was changed)")
        released = []
        for block in blocks:
            block.ref_count -= 1
            if block.ref_count == 0:
                released.append(block)
        self.free_queue.prepend_n(b for b in released if b.block_hash is None)
        for block in released:
            if block.block_hash is not None:
                self.free_queue.append(block)

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Add one reference to each, taking a free (cached) block off the free list."""
        for block in self._own(blocks, "touch"):
            if block.ref_count == 0:
                self.free_queue.remove(block)
            block.ref_count += 1

    def lookup(self, block_hash_: bytes) -> KVBlock | None:
        """A block holding the prefix ``block_hash_`` (the first registered), or None."""
        holders = self.cached.get(block_hash_)
        return next(iter(holders.values())) if holders else None

    def register(self, block: KVBlock, block_hash_: bytes) -> None:
        """Make a full block findable by its hash (also when other blocks hold that prefix)."""
        if self.prefix_caching and block.block_hash is None:
            self.cached.setdefault(block_hash_, {})[block.block_id] = block
            block.block_hash = block_hash_

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            holders = self.cached[block.block_hash]
            del holders[block.block_id]
            if not holders:
                del self.cached[block.block_hash]
            block.block_hash = None

    def _own(self, blocks: Iterable[KVBlock], what: str) -> list[KVBlock]:
        """``blocks`` as a list, each checked to be one of this pool's blocks."""
        blocks = list(blocks)
        for block in blocks:
            index = getattr(block, "block_id", None)
            if not isinstance(index, int) or not 0 <= index < self.num_blocks or self.blocks[index] is not block:
                raise LLMStateError(f"cannot {what} {block!r}: it is not a block of this pool "
                                    f"(nothing was changed)")
        return blocks

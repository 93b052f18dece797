"""The KV block pool: reference-counted blocks, an LRU free list, and prefix-cache hashes.

Follows vLLM's ``BlockPool``: a block in use by ``n`` sequences has ``ref_count == n``;
at 0 it joins the tail of the free list but keeps its contents and hash, so a later
sequence with the same prefix can revive it (``touch``) until allocation evicts it from
the head -- least recently freed first. A full block's hash chains its parent's hash,
its token ids and (first block only) an extra key such as an adapter name, so equal
hashes mean equal prefixes.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..errors import KVCacheFullError
from .validate import check_int

__all__ = ["KVBlock", "FreeBlockQueue", "BlockPool", "block_hash"]

_ROOT = b"rlx-kv-prefix-root"


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
        last = self._tail.prev_free
        block.prev_free, block.next_free = last, self._tail
        last.next_free = self._tail.prev_free = block
        self._len += 1

    def remove(self, block: KVBlock) -> None:
        block.prev_free.next_free, block.next_free.prev_free = block.next_free, block.prev_free
        block.prev_free = block.next_free = None
        self._len -= 1


class BlockPool:
    """``num_blocks`` blocks with reference counts, free list and prefix-cache map."""

    def __init__(self, num_blocks: int, prefix_caching: bool = True):
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.prefix_caching = bool(prefix_caching)
        self.blocks = [KVBlock(i) for i in range(self.num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        self.cached: dict[bytes, KVBlock] = {}

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones included: they can be evicted)."""
        return len(self.free_queue)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    def allocate(self, n: int) -> list[KVBlock]:
        """``n`` fresh blocks (ref count 1), least recently freed first, their cache
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
        """Drop one reference from each; blocks reaching 0 join the free list's tail in
        the order given (pass a sequence's blocks tail first: its tail evicts first)."""
        for block in blocks:
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue.append(block)

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Add one reference to each, taking a free (cached) block off the free list."""
        for block in blocks:
            if block.ref_count == 0:
                self.free_queue.remove(block)
            block.ref_count += 1

    def lookup(self, block_hash_: bytes) -> KVBlock | None:
        return self.cached.get(block_hash_)

    def register(self, block: KVBlock, block_hash_: bytes) -> None:
        """Make a full block findable by its hash (the first block with a hash keeps it)."""
        if self.prefix_caching and block_hash_ not in self.cached:
            self.cached[block_hash_] = block
            block.block_hash = block_hash_

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            del self.cached[block.block_hash]
            block.block_hash = None

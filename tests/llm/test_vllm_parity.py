"""The block pool against an independent transliteration of vLLM's
``vllm/v1/core/block_pool.py`` and ``FreeKVCacheBlockQueue`` (issue 21, case 4): freed
blocks without a hash go to the head of the free queue (``prepend_n``), cached ones to
the tail (``append_n``); allocation pops the head and evicts; one hash may map to
several blocks, the first registered answering lookups.

The reference leaves out what RLX's pool does not model: vLLM's null block (block 0,
never allocated) and KV-cache groups. It is a plain list, not a linked list, so that
it shares no code or structure with RLX's.
"""
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rlx_core.llm import BlockManager
from rlx_core.llm.blocks import BlockPool


class RefBlock:
    def __init__(self, block_id):
        self.block_id, self.ref_cnt, self.block_hash = block_id, 0, None


class RefBlockPool:
    """vLLM's BlockPool with prefix caching on: ``get_new_blocks``, ``touch``,
    ``free_blocks``, ``cache_full_blocks`` (one block at a time), ``get_cached_block``."""

    def __init__(self, num_blocks):
        self.blocks = [RefBlock(i) for i in range(num_blocks)]
        self.queue = list(self.blocks)                       # head first
        self.cached = {}                                     # hash -> {block id: block}

    def get_new_blocks(self, n):
        taken, self.queue = self.queue[:n], self.queue[n:]
        for block in taken:
            self._maybe_evict_cached_block(block)
            block.ref_cnt += 1
        return taken

    def _maybe_evict_cached_block(self, block):
        if block.block_hash is not None:
            holders = self.cached[block.block_hash]
            holders.pop(block.block_id)
            if not holders:
                del self.cached[block.block_hash]
            block.block_hash = None

    def touch(self, blocks):
        for block in blocks:
            if block.ref_cnt == 0:
                self.queue.remove(block)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks):
        for block in ordered_blocks:
            block.ref_cnt -= 1
        freeable = [b for b in ordered_blocks if b.ref_cnt == 0]
        self.queue[:0] = [b for b in freeable if b.block_hash is None]        # prepend_n
        self.queue += [b for b in freeable if b.block_hash is not None]       # append_n

    def cache_full_block(self, block, block_hash):
        block.block_hash = block_hash
        self.cached.setdefault(block_hash, {})[block.block_id] = block

    def get_cached_block(self, block_hash):
        holders = self.cached.get(block_hash)
        return next(iter(holders.values())) if holders else None


HASHES = [bytes([i]) * 16 for i in range(4)]      # few hashes: duplicates are common


class PoolParity(RuleBasedStateMachine):
    """The same operations on both pools; their states must stay identical."""

    def __init__(self):
        super().__init__()
        self.ours, self.ref = BlockPool(8), RefBlockPool(8)
        self.held: list[int] = []                    # one entry per reference a caller holds

    @rule(data=st.data())
    def allocate(self, data):
        n = data.draw(st.integers(0, self.ours.num_free))
        got, want = self.ours.allocate(n), self.ref.get_new_blocks(n)
        assert [b.block_id for b in got] == [b.block_id for b in want]
        self.held += [b.block_id for b in got]

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free(self, data):
        """Distinct blocks, in any order: what vLLM frees for one request (the same block
        twice in one call would be queued twice by vLLM; RLX's pool queues it once)."""
        distinct = sorted(set(self.held))
        chosen = data.draw(st.lists(st.sampled_from(distinct), min_size=1, max_size=len(distinct), unique=True))
        for block_id in chosen:
            self.held.remove(block_id)
        self.ours.free([self.ours.blocks[i] for i in chosen])
        self.ref.free_blocks([self.ref.blocks[i] for i in chosen])

    @precondition(lambda self: any(self.ours.blocks[i].block_hash is None for i in self.held))
    @rule(data=st.data(), digest=st.sampled_from(HASHES))
    def register_a_full_block(self, data, digest):
        block_id = data.draw(st.sampled_from([i for i in self.held if self.ours.blocks[i].block_hash is None]))
        self.ours.register(self.ours.blocks[block_id], digest)
        self.ref.cache_full_block(self.ref.blocks[block_id], digest)

    @rule(digest=st.sampled_from(HASHES))
    def hit_a_cached_prefix(self, digest):
        ours, ref = self.ours.lookup(digest), self.ref.get_cached_block(digest)
        assert (ours and ours.block_id) == (ref and ref.block_id)
        if ours is not None:
            self.ours.touch([ours])
            self.ref.touch([ref])
            self.held.append(ours.block_id)

    @invariant()
    def same_state(self):
        assert [b.block_id for b in self.ours.free_queue] == [b.block_id for b in self.ref.queue]
        assert {h: list(d) for h, d in self.ours.cached.items()} == {h: list(d) for h, d in self.ref.cached.items()}
        assert [b.ref_count for b in self.ours.blocks] == [b.ref_cnt for b in self.ref.blocks]
        assert [b.block_hash for b in self.ours.blocks] == [b.block_hash for b in self.ref.blocks]


PoolParity.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
test_block_pool_matches_vllm = PoolParity.TestCase


def test_partial_blocks_are_reused_before_cached_ones():
    """Issue 21's scenario: a cached prompt, then two short sequences whose partial blocks
    are freed last. vLLM reuses the partial blocks first and the prompt's 4 tokens are
    still cached; queued behind the cached blocks they would make the prompt evicted."""
    manager = BlockManager(num_blocks=5, block_size=2)
    manager.add_sequence("prompt")
    manager.reserve("prompt", [1, 2, 3, 4, 5])               # blocks 0, 1 full (cached), 2 partial
    for seq, token in (("x", 8), ("y", 9)):
        manager.add_sequence(seq)
        manager.reserve(seq, [token])                       # blocks 3, 4 partial
    for seq in ("prompt", "x", "y"):
        manager.free(seq)
    assert [b.block_id for b in manager.pool.free_queue] == [4, 3, 2, 1, 0]
    manager.add_sequence("other")
    manager.reserve("other", [7, 7, 7, 7, 7])                # 3 blocks: 4, 3, 2
    manager.add_sequence("again")
    assert manager.match_prefix("again", [1, 2, 3, 4, 5]) == 4


def test_blocks_with_the_same_prefix_all_stay_findable():
    """Two sequences computing the same prompt at once each fill a block of that prefix;
    both are registered (vLLM keeps both), and when the first is evicted the other one
    still answers."""
    manager = BlockManager(num_blocks=4, block_size=2)
    for seq in ("a", "b"):
        manager.add_sequence(seq)
        manager.reserve(seq, [1, 2, 3])                     # a: blocks 0, 1; b: blocks 2, 3
    digest = manager._seqs["a"].hashes[0]
    assert list(manager.pool.cached[digest]) == [0, 2]
    manager.free("a")
    manager.free("b")                                        # queue: 1, 3 (partial), 0, 2 (cached)
    manager.add_sequence("c")
    manager.reserve("c", [5, 5, 5, 5, 5])                   # takes 1, 3, 0: evicts a's copy
    assert list(manager.pool.cached[digest]) == [2]
    manager.add_sequence("d")
    assert manager.match_prefix("d", [1, 2, 9]) == 2 and manager.block_table("d") == [2]
    assert np.array_equal(manager.slots("d"), [4, 5])

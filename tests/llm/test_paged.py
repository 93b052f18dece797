"""Paged KV cache: invariants under random add / append / fork / free / prefix-match
sequences mixed with misuse that must be refused without any change (a hypothesis state
machine with a bounded run time), copy-on-write, prefix caching with LRU eviction, and
exhaustion that raises and changes nothing."""
import time
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rlx_core.errors import InputError, InputTypeError, KVCacheFullError, ResourceError, RlxError
from rlx_core.llm import BlockManager, LLMConfigError, PagedKVCache
from rlx_core.llm.blocks import FreeBlockQueue, KVBlock
from rlx_core.llm.validate import KVCacheMemoryError, KVSlotError, LLMStateError

LAYERS, HEADS, DIM = 2, 1, 2


def kv_of(prefix):
    """What a model would compute for the last token of ``prefix``: a function of the
    whole prefix, so that equal prefixes share equal K/V (what prefix caching relies on)."""
    value = (hash(tuple(prefix)) % 100_003) / 100_003
    k = np.array([[[value, -value]], [[value + 1, value - 1]]], np.float32)      # [layers, heads, dim]
    return k, k * 2


def kv_rows(tokens_before, new_tokens):
    rows = [kv_of(tokens_before + new_tokens[:i + 1]) for i in range(len(new_tokens))]
    k = np.stack([r[0] for r in rows], axis=1) if rows else np.zeros((LAYERS, 0, HEADS, DIM), np.float32)
    v = np.stack([r[1] for r in rows], axis=1) if rows else np.zeros((LAYERS, 0, HEADS, DIM), np.float32)
    return k, v


def snapshot(cache):
    manager = cache.manager
    return ({s: (manager.block_table(s), manager.tokens(s)) for s in manager.sequences},
            [b.ref_count for b in manager.pool.blocks], [b.block_id for b in manager.pool.free_queue],
            {h: list(holders) for h, holders in manager.pool.cached.items()},
            {s: cache.gather(s, 1) for s in manager.sequences})


def same_snapshot(a, b):
    assert a[:4] == b[:4]
    for seq in a[4]:
        np.testing.assert_array_equal(a[4][seq][0], b[4][seq][0])
        np.testing.assert_array_equal(a[4][seq][1], b[4][seq][1])


class PagedCacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.cache = PagedKVCache(LAYERS, HEADS, DIM, num_blocks=10, block_size=3)
        self.model: dict[int, list[int]] = {}        # sequence -> tokens it should hold
        self.next_id = 0
        self.full_errors = 0

    def _append(self, seq, tokens):
        k, v = kv_rows(self.model[seq], tokens)
        before = snapshot(self.cache)
        try:
            self.cache.append(seq, tokens, k, v)
        except KVCacheFullError:
            self.full_errors += 1
            same_snapshot(before, snapshot(self.cache))
            return
        self.model[seq] = self.model[seq] + tokens

    @rule(prompt=st.lists(st.integers(0, 2), max_size=12), extra=st.sampled_from([None, "lora-a"]))
    def add(self, prompt, extra):
        seq, self.next_id = self.next_id, self.next_id + 1
        self.cache.add_sequence(seq, extra)
        cached = self.cache.match_prefix(seq, prompt)
        assert cached % self.cache.block_size == 0 and cached <= max(len(prompt) - 1, 0)
        self.model[seq] = prompt[:cached]
        self._append(seq, prompt[cached:])

    @precondition(lambda self: self.model)
    @rule(data=st.data(), tokens=st.lists(st.integers(0, 2), min_size=1, max_size=5))
    def append(self, data, tokens):
        self._append(data.draw(st.sampled_from(sorted(self.model))), tokens)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.model)))
        child, self.next_id = self.next_id, self.next_id + 1
        self.cache.fork(parent, child)
        self.model[child] = list(self.model[parent])

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.model)))
        self.cache.free(seq)
        del self.model[seq]

    # -- misuse: each must raise its RlxError and leave every sequence, count and K/V as it was

    def _refused(self, error, call, *args):
        before, k, v = snapshot(self.cache), self.cache.k.copy(), self.cache.v.copy()
        with pytest.raises(error):
            call(*args)
        same_snapshot(before, snapshot(self.cache))
        np.testing.assert_array_equal(self.cache.k, k)
        np.testing.assert_array_equal(self.cache.v, v)

    @rule(data=st.data(), bad=st.sampled_from([-1, -30, 30, 31, 2 ** 40, -2 ** 62]))
    def write_outside_the_pool(self, data, bad):
        slots = data.draw(st.lists(st.integers(0, 29), max_size=3))
        slots.insert(data.draw(st.integers(0, len(slots))), bad)
        rows = np.ones((len(slots), HEADS, DIM), np.float32)
        self._refused(KVSlotError, self.cache.write, data.draw(st.integers(0, LAYERS - 1)), np.array(slots), rows, rows)

    @rule(slots=st.sampled_from([np.array([0.0, 1.0]), np.array([[0, 1]]), np.array([True, False]), ["a", "b"]]))
    def write_with_slots_that_are_not_indices(self, slots):
        rows = np.ones((2, HEADS, DIM), np.float32)
        self._refused(KVSlotError, self.cache.write, 0, slots, rows, rows)

    @rule(data=st.data())
    def free_a_block_more_often_than_it_is_held(self, data):
        block = self.cache.manager.pool.blocks[data.draw(st.integers(0, 9))]
        self._refused(LLMStateError, self.cache.manager.pool.free, [block] * (block.ref_count + 1))

    @rule(index=st.integers(0, 9))
    def free_a_block_of_another_pool(self, index):
        self._refused(LLMStateError, self.cache.manager.pool.free, [KVBlock(index)])

    @rule(seq=st.sampled_from([[0], {"a": 1}, {1}, np.zeros(2)]))
    def use_an_unhashable_sequence_id(self, seq):
        for call, args in ((self.cache.add_sequence, (seq,)), (self.cache.free, (seq,)),
                           (self.cache.reserve, (seq, [1])), (self.cache.gather, (seq, 0))):
            self._refused(InputTypeError, call, *args)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), tokens=st.sampled_from([[-1], [1.5], [[1, 2]], ["x"]]))
    def append_tokens_that_are_not_ids(self, data, tokens):
        seq = data.draw(st.sampled_from(sorted(self.model)))
        self._refused(InputError, self.cache.reserve, seq, tokens)

    @rule()
    def use_an_unknown_sequence(self):
        self._refused(InputError, self.cache.free, self.next_id + 100)
        self._refused(InputError, self.cache.fork, self.next_id + 100, self.next_id + 101)

    @invariant()
    def reference_counts_match_block_tables(self):
        manager = self.cache.manager
        counts = np.zeros(manager.pool.num_blocks, int)
        for seq in manager.sequences:
            for block in manager.block_table(seq):
                counts[block] += 1
        assert [b.ref_count for b in manager.pool.blocks] == counts.tolist()

    @invariant()
    def free_list_holds_exactly_the_unreferenced_blocks(self):
        pool = self.cache.manager.pool
        free = [b.block_id for b in pool.free_queue]
        assert len(free) == len(set(free)) == pool.num_free
        assert set(free) == {b.block_id for b in pool.blocks if b.ref_count == 0}
        assert pool.num_used + pool.num_free == pool.num_blocks

    @invariant()
    def tables_cover_the_tokens(self):
        manager = self.cache.manager
        assert sorted(manager.sequences) == sorted(self.model)
        for seq, tokens in self.model.items():
            assert manager.tokens(seq) == tokens
            assert len(manager.block_table(seq)) == -(-len(tokens) // manager.block_size)

    @invariant()
    def gathered_kv_is_what_each_sequence_appended(self):
        for seq, tokens in self.model.items():
            expected_k, expected_v = kv_rows([], tokens)
            for layer in range(LAYERS):
                k, v = self.cache.gather(seq, layer)
                np.testing.assert_array_equal(k, expected_k[layer])
                np.testing.assert_array_equal(v, expected_v[layer])

    @invariant()
    def cache_map_points_at_blocks_with_that_hash(self):
        pool = self.cache.manager.pool
        for digest, holders in pool.cached.items():
            assert holders and all(block.block_hash == digest for block in holders.values())
        assert sum(b.block_hash is not None for b in pool.blocks) == sum(map(len, pool.cached.values()))


# bounded for CI: 120 runs of up to 30 steps, each run well under its 5 s deadline (~30 ms here)
PagedCacheMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=30,
                                               deadline=timedelta(seconds=5))
test_paged_cache_state_machine = PagedCacheMachine.TestCase


def test_fork_copies_the_shared_partial_block_on_write():
    cache = PagedKVCache(1, 1, 1, num_blocks=6, block_size=4)
    cache.add_sequence("parent")
    cache.append("parent", [1, 2, 3, 4, 5], np.arange(5, dtype=np.float32).reshape(1, 5, 1, 1), np.zeros((1, 5, 1, 1)))
    cache.fork("parent", "child")
    assert cache.manager.block_table("child") == cache.manager.block_table("parent") == [0, 1]
    cache.append("child", [9], np.full((1, 1, 1, 1), 90, np.float32), np.zeros((1, 1, 1, 1)))
    assert cache.manager.block_table("child") == [0, 2]           # full block 0 still shared
    cache.append("parent", [7], np.full((1, 1, 1, 1), 70, np.float32), np.zeros((1, 1, 1, 1)))
    assert cache.manager.block_table("parent") == [0, 1]          # now sole owner: no copy
    assert cache.gather("parent", 0)[0].ravel().tolist() == [0, 1, 2, 3, 4, 70]
    assert cache.gather("child", 0)[0].ravel().tolist() == [0, 1, 2, 3, 4, 90]
    assert [b.ref_count for b in cache.manager.pool.blocks[:3]] == [2, 1, 1]


def test_parallel_sampling_shares_the_prompt():
    manager = BlockManager(num_blocks=10, block_size=16)
    manager.add_sequence(0)
    manager.reserve(0, list(range(40)))                   # 3 blocks, the last partly filled
    for child in range(1, 4):
        manager.fork(0, child)
    assert manager.pool.num_used == 3
    for seq in range(4):
        manager.reserve(seq, [100 + seq])                 # each needs its own copy of block 2
    assert manager.pool.num_used == 3 + 3                 # the last writer owns the original


def test_prefix_cache_hit_reuses_blocks_and_skips_the_last_token():
    manager = BlockManager(num_blocks=8, block_size=4)
    prompt = list(range(10))
    manager.add_sequence("a")
    manager.reserve("a", prompt)
    manager.add_sequence("b")
    assert manager.match_prefix("b", prompt) == 8          # two full blocks
    assert manager.block_table("b") == manager.block_table("a")[:2]
    manager.add_sequence("c")
    assert manager.match_prefix("c", prompt[:8]) == 4      # the whole prompt is never matched
    manager.add_sequence("d", extra_key="other-adapter")
    assert manager.match_prefix("d", prompt) == 0          # extra key: another prefix space
    manager.add_sequence("e")
    assert manager.match_prefix("e", [0, 1, 2, 99, 4, 5, 6, 7, 8]) == 0


def test_freed_blocks_stay_cached_until_evicted_least_recent_first():
    manager = BlockManager(num_blocks=4, block_size=2)
    manager.add_sequence("a")
    manager.reserve("a", [1, 2, 3, 4, 5])                  # blocks 0, 1 full (cached), 2 partial
    manager.free("a")
    assert [b.block_id for b in manager.pool.free_queue] == [2, 3, 1, 0]   # partial first, cached tail first
    manager.add_sequence("b")
    assert manager.match_prefix("b", [1, 2, 3, 4, 9]) == 4                 # revived from the free list
    manager.free("b")
    manager.add_sequence("c")
    manager.reserve("c", [7] * 6)                          # takes blocks 2, 3, 1: the prefix's tail
    manager.add_sequence("d")
    assert manager.match_prefix("d", [1, 2, 3, 4, 9]) == 2  # its head block is still cached


def test_exhaustion_raises_and_leaves_every_sequence_intact():
    cache = PagedKVCache(LAYERS, HEADS, DIM, num_blocks=4, block_size=2)
    for seq, tokens in (("a", [1, 2, 3]), ("b", [4, 5])):
        cache.add_sequence(seq)
        cache.append(seq, tokens, *kv_rows([], tokens))
    cache.fork("a", "c")
    before = snapshot(cache)
    with pytest.raises(KVCacheFullError, match=r"sequence 'c' needs 3 more block\(s\) of 2 tokens for 4 token\(s\), "
                                               r"but 1 of 4 are free.*nothing was changed"):
        cache.append("c", [6, 7, 8, 9], *kv_rows([1, 2, 3], [6, 7, 8, 9]))
    same_snapshot(before, snapshot(cache))
    assert cache.manager.blocks_needed("c", 1) == 1       # the copy-on-write block alone fits
    cache.append("c", [6], *kv_rows([1, 2, 3], [6]))


def test_gather_batch_is_sdpa_layout():
    cache = PagedKVCache(LAYERS, 2, 3, num_blocks=6, block_size=2)
    rng = np.random.default_rng(0)
    data = {}
    for seq, n in (("x", 3), ("y", 5)):
        cache.add_sequence(seq)
        k, v = rng.standard_normal((2, LAYERS, n, 2, 3)).astype(np.float32)
        cache.append(seq, list(range(n)), k, v)
        data[seq] = (k, v)
    k, v, lengths = cache.gather_batch(["x", "y"], 1)
    assert k.shape == (2, 2, 5, 3) and lengths.tolist() == [3, 5]
    np.testing.assert_array_equal(k[0, :, :3], data["x"][0][1].transpose(1, 0, 2))
    np.testing.assert_array_equal(v[1], data["y"][1][1].transpose(1, 0, 2))
    assert not k[0, :, 3:].any()
    assert cache.block_tables(["x", "y"]).tolist() == [[0, 1, -1], [2, 3, 4]]


def test_gathered_kv_feeds_torch_attention():
    """Attention over the gathered cache equals torch's SDPA on the original tensors."""
    torch = pytest.importorskip("torch")
    cache = PagedKVCache(1, 2, 8, num_blocks=8, block_size=4, dtype="f32")
    rng = np.random.default_rng(1)
    k, v = rng.standard_normal((2, 1, 11, 2, 8)).astype(np.float32)
    cache.add_sequence(0)
    cache.append(0, list(range(6)), k[:, :6], v[:, :6])
    cache.fork(0, 1)
    cache.append(0, list(range(6, 11)), k[:, 6:], v[:, 6:])
    q = rng.standard_normal((1, 2, 1, 8)).astype(np.float32)
    gk, gv, _ = cache.gather_batch([0], 0)
    got = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, gk, gv)))
    dense_k, dense_v = (torch.from_numpy(t[0].transpose(1, 0, 2)[None]) for t in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(torch.from_numpy(q), dense_k, dense_v)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_free_queue_order_and_removal():
    blocks = [KVBlock(i) for i in range(4)]
    queue = FreeBlockQueue(blocks)
    queue.remove(blocks[2])
    assert [b.block_id for b in queue] == [0, 1, 3] and len(queue) == 3
    assert queue.popleft() is blocks[0]
    queue.append(blocks[0])
    assert [b.block_id for b in queue] == [1, 3, 0]


def test_errors():
    cache = PagedKVCache(1, 1, 4, num_blocks=2, block_size=2, dtype="bf16")
    cache.add_sequence(0)
    with pytest.raises(InputError, match="already exists"):
        cache.add_sequence(0)
    with pytest.raises(InputError, match="unknown sequence 5"):
        cache.free(5)
    with pytest.raises(InputError, match=r"k must be real numbers of shape \(1, 2, 1, 4\)"):
        cache.append(0, [1, 2], np.zeros((1, 2, 4)), np.zeros((1, 2, 1, 4)))
    with pytest.raises(InputError, match="non-negative integer ids"):
        cache.reserve(0, [1.5])
    with pytest.raises(InputError, match="non-negative integer ids"):
        cache.reserve(0, [-1])
    with pytest.raises(LLMConfigError, match="layer must be in"):
        cache.gather(0, 1)
    with pytest.raises(LLMConfigError, match="dtype must be f32, f16 or bf16"):
        PagedKVCache(1, 1, 4, num_blocks=2, dtype="i8")
    with pytest.raises(LLMConfigError, match="num_blocks must be in"):
        BlockManager(0)
    cache.reserve(0, [1, 2])
    with pytest.raises(InputError, match="needs an empty sequence"):
        cache.match_prefix(0, [1, 2, 3])
    with pytest.raises(InputError, match="cannot fork into sequence 0"):
        cache.fork(0, 0)


def test_gather_prefix_and_fixed_width():
    cache = PagedKVCache(1, 1, 2, num_blocks=4, block_size=2)
    cache.add_sequence("s")
    k = np.arange(10, dtype=np.float32).reshape(1, 5, 1, 2)
    cache.append("s", [1, 2, 3, 4, 5], k, -k)
    np.testing.assert_array_equal(cache.gather("s", 0, length=3)[0], k[0, :3])
    gk, gv, lengths = cache.gather_batch(["s", "s"], 0, lengths=[2, 5], width=8)
    assert gk.shape == (2, 1, 8, 2) and lengths.tolist() == [2, 5]
    np.testing.assert_array_equal(gk[0, 0, :2], k[0, :2, 0])
    assert not gk[0, :, 2:].any() and not gv[1, :, 5:].any()
    with pytest.raises(LLMConfigError, match="width must be in"):
        cache.gather_batch(["s"], 0, width=4)
    with pytest.raises(LLMConfigError, match="length of sequence 's' must be in"):
        cache.gather("s", 0, length=6)


# --- issue 20: misuse that used to corrupt or crash ---------------------------------------------

def two_sequences():
    cache = PagedKVCache(LAYERS, HEADS, DIM, num_blocks=4, block_size=2)
    for seq, tokens in (("a", [1, 2, 3]), ("b", [4, 5])):
        cache.add_sequence(seq)
        cache.append(seq, tokens, *kv_rows([], tokens))
    return cache


@pytest.mark.parametrize("slot", [-1, -8, 8, 9, 2 ** 40])
def test_write_outside_the_pool_is_refused(slot):
    """Slot -1 used to wrap to the pool's last slot (another sequence's K/V); slot 8 of
    an 8-slot pool raised numpy's IndexError."""
    cache = two_sequences()
    before, k = snapshot(cache), cache.k.copy()
    rows = np.full((2, HEADS, DIM), 99, np.float32)
    with pytest.raises(KVSlotError, match=f"slot {slot} is outside the pool's 8 slots .*nothing was written") as info:
        cache.write(0, np.array([0, slot]), rows, rows)
    assert isinstance(info.value, (InputError, ValueError)) and not isinstance(info.value, IndexError)
    same_snapshot(before, snapshot(cache))
    np.testing.assert_array_equal(cache.k, k)


def test_freeing_a_block_twice_is_refused():
    cache = two_sequences()
    pool = cache.manager.pool
    block = pool.blocks[cache.manager.block_table("b")[0]]
    before = snapshot(cache)
    with pytest.raises(LLMStateError, match=f"block {block.block_id} freed 2 time\\(s\\) but held by 1"):
        pool.free([block, block])
    with pytest.raises(LLMStateError, match="not a block of this pool"):
        pool.free([KVBlock(block.block_id)])
    same_snapshot(before, snapshot(cache))
    pool.free([block])
    with pytest.raises(LLMStateError, match="held by 0 sequence"):
        pool.free([block])
    assert block.ref_count == 0


@pytest.mark.parametrize("seq", [[1], {"id": 1}, np.arange(2)])
def test_unhashable_sequence_ids_are_type_errors(seq):
    cache = two_sequences()
    for call in (lambda: cache.add_sequence(seq), lambda: cache.free(seq), lambda: cache.fork("a", seq),
                 lambda: cache.append(seq, [1], *kv_rows([], [1])), lambda: seq in cache.manager):
        with pytest.raises(InputTypeError, match="sequence id must be hashable") as info:
            call()
        assert isinstance(info.value, TypeError)


def test_a_pool_larger_than_memory_fails_at_once_naming_the_bytes():
    """PagedKVCache(num_blocks=2**40) used to build 2**40 block objects for 18 s and then
    die with MemoryError."""
    start = time.perf_counter()
    with pytest.raises(KVCacheMemoryError, match=r"needs \d+ bytes \(.* GiB\), but this machine has \d+ bytes") as info:
        PagedKVCache(32, 8, 128, num_blocks=2 ** 40)
    assert isinstance(info.value, ResourceError) and isinstance(info.value, MemoryError)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RlxError)
    with pytest.raises(KVCacheMemoryError, match="bookkeeping alone"):
        BlockManager(2 ** 40)
    assert time.perf_counter() - start < 1.0

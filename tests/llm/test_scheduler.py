"""Continuous batching: every request completes, budgets hold every step, and the
generated text does not depend on batching, chunking or preemption."""
import numpy as np
import pytest

from rlx_core.errors import InputError, InputTypeError, KVCacheFullError
from rlx_core.llm import BlockManager, Request, Scheduler
from rlx_core.llm.validate import LLMStateError

VOCAB = 50


def next_token(tokens):
    """A deterministic stand-in for a model: the next token depends on the whole text."""
    return (sum(t * (i + 1) for i, t in enumerate(tokens[-4:])) + 7 * len(tokens)) % VOCAB


def run(requests, num_blocks, block_size=4, budget=64, max_seqs=8, arrivals=None):
    """Drive the scheduler to completion, checking the per-step guarantees."""
    manager = BlockManager(num_blocks, block_size)
    scheduler = Scheduler(manager, budget, max_seqs)
    arrivals = arrivals or {}
    pending = sorted(requests, key=lambda r: arrivals.get(r.request_id, 0))
    step, finished, started = 0, [], set()
    stats = {"preemptions": 0, "chunks": 0, "prefix_tokens": 0}
    while pending or scheduler.has_unfinished:
        while pending and arrivals.get(pending[0].request_id, 0) <= step:
            scheduler.add_request(pending.pop(0))
        out = scheduler.schedule()
        assert out.num_tokens <= budget
        assert manager.pool.num_used <= num_blocks
        assert len(scheduler.running) <= max_seqs
        for chunk in out.chunks:
            np.testing.assert_array_equal(chunk.slots, manager.slots(chunk.request.request_id)[chunk.start:])
            stats["chunks"] += not chunk.emits
            if chunk.request.request_id not in started:          # admitted: starts after its cached prefix
                stats["prefix_tokens"] += chunk.start
                started.add(chunk.request.request_id)
        stats["preemptions"] += len(out.preempted)
        sampled = {c.request.request_id: next_token(c.request.tokens) for c in out.chunks if c.emits}
        finished += scheduler.update(out, sampled)
        step += 1
        assert step < 10_000, "the scheduler stopped making progress"
    assert manager.pool.num_used == 0 and not manager.sequences
    return {r.request_id: r.output for r in finished}, stats


def make_requests(n, seed, shared_prefix=()):
    rng = np.random.default_rng(seed)
    return [Request(i, list(shared_prefix) + rng.integers(0, VOCAB, rng.integers(1, 40)).tolist(),
                    int(rng.integers(1, 30))) for i in range(n)]


def reference_outputs(requests):
    out = {}
    for r in requests:
        tokens = list(r.prompt)
        for _ in range(r.max_new_tokens):
            tokens.append(next_token(tokens))
            if tokens[-1] == r.eos_token:
                break
        out[r.request_id] = tokens[len(r.prompt):]
    return out


def test_roomy_and_tight_pools_generate_the_same_text():
    requests = make_requests(60, seed=1)
    expected = reference_outputs(requests)
    roomy, roomy_stats = run(make_requests(60, seed=1), num_blocks=2000, budget=512, max_seqs=64)
    tight, tight_stats = run(make_requests(60, seed=1), num_blocks=24, budget=16, max_seqs=8)
    assert roomy == tight == expected
    assert roomy_stats["preemptions"] == 0
    assert tight_stats["preemptions"] > 0 and tight_stats["chunks"] > 0


def test_staggered_arrivals_complete():
    requests = make_requests(40, seed=2)
    arrivals = {r.request_id: 3 * i for i, r in enumerate(requests)}
    outputs, _ = run(requests, num_blocks=30, budget=24, arrivals=arrivals)
    assert outputs == reference_outputs(make_requests(40, seed=2))


def test_shared_prompt_prefix_is_computed_once():
    system = list(range(1, 21))                               # 5 full blocks of 4
    requests = make_requests(10, seed=3, shared_prefix=system)
    arrivals = {r.request_id: 0 if r.request_id == 0 else 20 for r in requests}
    outputs, stats = run(requests, num_blocks=200, arrivals=arrivals)
    assert outputs == reference_outputs(make_requests(10, seed=3, shared_prefix=system))
    assert stats["prefix_tokens"] >= 9 * 20


def test_chunked_prefill_splits_long_prompts():
    request = Request("long", list(range(45)), 2)
    manager = BlockManager(100, 4)
    scheduler = Scheduler(manager, max_num_batched_tokens=16)
    scheduler.add_request(request)
    sizes = []
    while scheduler.has_unfinished:
        out = scheduler.schedule()
        sizes.append([(c.start, c.num_tokens, c.emits) for c in out.chunks])
        scheduler.update(out, {c.request.request_id: 1 for c in out.chunks if c.emits})
    assert sizes == [[(0, 16, False)], [(16, 16, False)], [(32, 13, True)], [(45, 1, True)]]
    assert request.output == [1, 1]


def test_decode_steps_are_one_token_each_and_eos_stops():
    requests = [Request(i, [i + 1] * 5, 50, eos_token=next_token([i + 1] * 5 + [0]) if i == 1 else None)
                for i in range(3)]
    manager = BlockManager(100, 4)
    scheduler = Scheduler(manager, 64, 8)
    for r in requests:
        scheduler.add_request(r)
    first = scheduler.schedule()
    assert [c.num_tokens for c in first.chunks] == [5, 5, 5]
    scheduler.update(first, {r.request_id: 0 for r in requests})
    second = scheduler.schedule()
    assert [c.num_tokens for c in second.chunks] == [1, 1, 1]
    done = scheduler.update(second, {r.request_id: next_token(r.tokens) for r in requests})
    assert [r.request_id for r in done] == [1] and requests[1].output[-1] == requests[1].eos_token


def test_preempted_request_is_recomputed_from_the_front_of_the_queue():
    manager = BlockManager(num_blocks=4, block_size=2)
    scheduler = Scheduler(manager, 100, 8)
    a, b = Request("a", [1, 2, 3, 4], 3), Request("b", [4, 5, 6, 7], 3)
    scheduler.add_request(a)
    scheduler.add_request(b)
    out = scheduler.schedule()                               # 2 + 2 blocks: the pool is full
    scheduler.update(out, {"a": 7, "b": 8})
    out = scheduler.schedule()                               # a's 5th token needs a block: b is preempted
    assert [c.request.request_id for c in out.chunks] == ["a"] and out.preempted == [b]
    assert b.num_computed == 0 and scheduler.waiting[0] is b and b.output == [8]
    scheduler.update(out, {"a": 9})
    while scheduler.has_unfinished:
        out = scheduler.schedule()
        scheduler.update(out, {c.request.request_id: 1 for c in out.chunks if c.emits})
    assert b.num_preemptions == 1 and len(b.output) == 3


def test_errors():
    scheduler = Scheduler(BlockManager(4, 4), 16, 4)
    with pytest.raises(KVCacheFullError, match="needs up to 5 blocks .* pool has only 4: it could never finish"):
        scheduler.add_request(Request("big", [1] * 15, 5))
    scheduler.add_request(Request("r", [1, 2], 3))
    with pytest.raises(InputError, match="already added"):
        scheduler.add_request(Request("r", [1], 1))
    with pytest.raises(InputError, match="empty prompt"):
        Request("e", [], 3)
    out = scheduler.schedule()
    with pytest.raises(InputError, match="needs a sampled token"):
        scheduler.update(out, {})


def scheduler_state(scheduler):
    manager = scheduler.manager
    requests = (*scheduler.waiting, *scheduler.running)
    return ([(r.request_id, r.status, r.num_computed, list(r.output)) for r in requests],
            {s: manager.block_table(s) for s in manager.sequences}, [b.ref_count for b in manager.pool.blocks],
            [b.block_id for b in manager.pool.free_queue])


def test_schedule_twice_without_update_is_refused_and_changes_nothing():
    """Issue 20, item 5: a second schedule() would reserve the same prompt tokens again."""
    scheduler = Scheduler(BlockManager(8, 4), 16, 4)
    scheduler.add_request(Request("r", [1, 2, 3, 4, 5, 6], 2))
    out = scheduler.schedule()
    before = scheduler_state(scheduler)
    with pytest.raises(LLMStateError, match=r"schedule\(\) called again before update\(\).*6 tokens"):
        scheduler.schedule()
    assert scheduler_state(scheduler) == before and scheduler.manager.num_tokens("r") == 6
    scheduler.update(out, {"r": 9})
    with pytest.raises(LLMStateError, match="not the one awaiting its update"):
        scheduler.update(out, {"r": 9})                    # recording the step twice
    assert scheduler.running[0].output == [9]
    scheduler.update(scheduler.schedule(), {"r": 3})
    assert not scheduler.has_unfinished


def test_update_with_a_missing_token_changes_nothing():
    scheduler = Scheduler(BlockManager(8, 4), 16, 4)
    for request_id in ("a", "b"):
        scheduler.add_request(Request(request_id, [1, 2], 2))
    out = scheduler.schedule()
    before = scheduler_state(scheduler)
    with pytest.raises(InputError, match=r"'b' reached the end .*\(nothing was changed\)"):
        scheduler.update(out, {"a": 5})
    with pytest.raises(InputTypeError, match="sampled must map request ids to tokens"):
        scheduler.update(out, [5, 6])
    assert scheduler_state(scheduler) == before
    scheduler.update(out, {"a": 5, "b": 6})                 # the step can still be recorded
    assert [r.output for r in scheduler.running] == [[5], [6]]


def test_unhashable_request_ids_are_refused():
    """Issue 20, item 11: a list as an id is a clear TypeError, not one from a set lookup."""
    with pytest.raises(InputTypeError, match=r"request_id must be hashable .*list \[1\]") as info:
        Request([1], [1, 2], 2)
    assert isinstance(info.value, TypeError)

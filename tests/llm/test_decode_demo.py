"""The integration example: a tiny decoder graph through CompiledGraph, the paged cache,
the scheduler and sampler chains must give the logits a full, cache-free recomputation
gives, however the requests were chunked, batched or preempted."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "decode_demo.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("decode_demo", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["decode_demo"] = module            # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["decode_demo"]


@pytest.fixture(scope="module")
def tight_run(demo):
    return demo.run_demo(num_requests=6, max_new_tokens=8, num_blocks=8)


def test_every_request_completes_under_preemption(tight_run):
    engine, finished, _ = tight_run
    assert sorted(len(r.output) for r in finished) == [8] * 6
    assert engine.preemptions > 0
    assert engine.cache.manager.pool.num_used == 0


def test_cached_batched_logits_match_full_recomputation(demo, tight_run):
    engine, finished, params = tight_run
    for request in finished:
        used = engine.logits_used[request.request_id]
        assert len(used) == len(request.output)
        for i, row in enumerate(used):
            expected = demo.reference_logits(engine.cfg, params, request.prompt + request.output[:i])
            np.testing.assert_allclose(row, expected, rtol=1e-4, atol=1e-4)
        if "greedy" in request.request_id:
            assert request.output == [int(np.argmax(row)) for row in used]


def test_pool_size_does_not_change_the_text(demo, tight_run):
    _, tight, _ = tight_run
    _, roomy, _ = demo.run_demo(num_requests=6, max_new_tokens=8, num_blocks=200)
    assert {r.request_id: r.output for r in tight} == {r.request_id: r.output for r in roomy}


def test_main_prints_a_table(demo, capsys):
    demo.main(["--requests", "2", "--max-new", "4"])
    out = capsys.readouterr().out
    assert "0:greedy" in out and "1:llama defaults" in out and "8 tokens generated" in out

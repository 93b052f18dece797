"""The named workloads behind `rlx bench` and the pick-accuracy sweep."""
import numpy as np
import pytest

from rlx_core.errors import RlxError
from rlx_core.reference import evaluate
from rlx_core.select.workloads import SWEEP, build, random_feeds, sweep, workload_names


def test_sweep_covers_the_issue_targets():
    specs = sweep()
    assert specs == SWEEP and len(specs) >= 20
    names = {s.split(":")[0] for s in specs}
    assert {"matmul", "chain", "transformer", "fft"} <= names
    sizes = [int(s.split(":")[1]) for s in specs if s.startswith("matmul:")]
    assert min(sizes) == 16 and max(sizes) == 2048


@pytest.mark.parametrize("spec", ["chain:64:5", "residual:4:8", "matmul:8", "mlp:2:8", "transformer:4:8:2", "fft:2:16"])
def test_small_workloads_build_and_evaluate(spec):
    graph = build(spec)
    inputs, params = random_feeds(graph, seed=3)
    outs = evaluate(graph, inputs, params)
    assert all(np.isfinite(np.asarray(o)).all() for o in outs)
    again, _ = random_feeds(graph, seed=3)
    assert all(np.array_equal(inputs[k], again[k]) for k in inputs)


def test_feeds_follow_declared_dtypes():
    graph = build("fft:2:16")
    inputs, params = random_feeds(graph)
    assert inputs["x"].dtype == np.float32 and inputs["x"].shape == (2, 16) and params == {}


@pytest.mark.parametrize("spec,message", [("warp:3", "unknown workload 'warp'"),
                                          ("matmul:big", "bad workload 'matmul:big'.*usage: matmul:N")])
def test_bad_specs(spec, message):
    with pytest.raises(RlxError, match=message):
        build(spec)


def test_names_list_usage():
    assert workload_names()["transformer"].startswith("transformer:S:D:H")

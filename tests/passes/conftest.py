"""Helpers for the graph-pass tests: run one pass (or the pipeline) and check that the
result computes what the original graph computes, on the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from rlx_core.reference import evaluate
from rlx_core.testing.compare import assert_close


def random_feeds(graph, seed=0):
    """Seeded values for every input and param of ``graph`` (bools random, ints small)."""
    rng = np.random.default_rng(seed)
    out = {}
    for node in graph.input_nodes + graph.param_nodes:
        dims, dt = tuple(node.attrs["dims"]), node.attrs["dtype"]
        if dt.is_bool:
            out[node.attrs["name"]] = rng.random(dims) < 0.7
        elif dt.is_float:
            out[node.attrs["name"]] = rng.standard_normal(dims).astype(dt.np)
        else:
            out[node.attrs["name"]] = rng.integers(0, 3, dims).astype(dt.np)
    return out


def check_same(before, after, feeds=None, scale=1.0):
    """``after`` has ``before``'s interface and outputs (per-dtype tolerance, reference)."""
    after.verify()
    assert after.input_names == before.input_names and after.param_names == before.param_names
    assert after.output_names == before.output_names and after.output_shapes == before.output_shapes
    feeds = random_feeds(before) if feeds is None else feeds
    inputs = {k: v for k, v in feeds.items() if k in before.input_names}
    params = {k: v for k, v in feeds.items() if k in before.param_names}
    want = evaluate(before, inputs, params)
    got = evaluate(after, inputs, params)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, before.output_shapes[i].dtype, scale, what=f"output {i}")


def kinds(graph) -> list[str]:
    return [n.kind for n in graph.nodes]


@pytest.fixture
def same():
    return check_same

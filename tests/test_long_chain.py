"""A chain of 10000 nodes compiles and runs right on every installed device (issue 20,
item 16: 1000 chained adds hit a RecursionError in the fusion grouping, and the affine
folding pass walked every chain once per node)."""
import numpy as np
import pytest

from rlx_core import Graph, Session, Shape

LENGTH = 10_000


@pytest.fixture(scope="module")
def chain():
    g = Graph("chain")
    y = g.input("x", Shape((4,), "f32"))
    for _ in range(LENGTH):
        y = g.add(y, 1.0)
    g.set_outputs([y])
    return g


def test_a_10000_node_chain_compiles_and_runs(chain, any_device):
    x = np.arange(4, dtype=np.float32)
    out = Session(any_device).compile(chain).run({"x": x})[0]
    np.testing.assert_array_equal(out, x + LENGTH)

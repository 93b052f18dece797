"""The index ops' out-of-range semantics (``rlx_core.ir.ops.movement``): the reference's
host mode names the node, the device mode's clamp, and indices into an empty axis."""
import numpy as np
import pytest

from rlx_core import Graph, InputError, ShapeError, evaluate
from rlx_core.reference.movement import clamped_indices


@pytest.mark.parametrize("bad", [5, -6, 2**62, -2**63])
def test_reference_error_names_the_node_index_and_axis(bad):
    g = Graph("oob")
    t, i = g.input("t", (2, 5), "f32"), g.input("i", (3,), "i64")
    g.set_outputs([g.gather(t, i, 1, name="emb")])
    with pytest.raises(InputError, match=rf"%\d+ gather 'emb': index {bad} is out of range for axis 1 of size 5 "
                                         r"\(valid: -5\.\.4\)"):
        evaluate(g, {"t": np.zeros((2, 5), np.float32), "i": np.array([0, bad, -1], np.int64)})


def test_device_mode_wraps_once_then_clamps():
    idx = np.array([0, 4, 5, -1, -5, -6, 10**9, -2**63, 2**63 - 1], np.int64)
    assert clamped_indices(idx, 5).tolist() == [0, 4, 4, 4, 0, 0, 4, 0, 4]


@pytest.mark.parametrize("build", [
    lambda g, x, i: g.gather(x, i, 1),
    lambda g, x, i: g.gather_elements(x, g.reshape(i, (2, 1)), 1),
    lambda g, x, i: g.scatter_add(x, i, g.constant(np.ones((2, 2), np.float32)), axis=1),
])
def test_indices_into_an_empty_axis_are_refused_when_built(build):
    g = Graph("empty")
    x, i = g.input("x", (2, 0), "f32"), g.input("i", (2,), "i32")
    with pytest.raises(ShapeError, match=r"indexes axis 1 of \[2, 0\], which is empty, with 2 indices"):
        build(g, x, i)

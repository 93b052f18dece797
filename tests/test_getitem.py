"""``x[index]`` on graph values: numpy basic indexing, lowered to slice + reshape."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlx_core.errors import OpAttributeError, ShapeError
from rlx_core.ir import Graph
from rlx_core.reference import evaluate


def index_and_evaluate(dims, index):
    """(graph, what the reference computes for x[index], numpy's x[index])."""
    x_val = np.arange(int(np.prod(dims)), dtype=np.float32).reshape(dims)
    g = Graph("getitem")
    x = g.input("x", dims)
    g.set_outputs([x[index]])
    return g, evaluate(g, {"x": x_val})[0], x_val[index]


def _axis_index(n):
    """A strategy for one int or slice indexing an axis of size ``n``."""
    bound = st.none() | st.integers(-7, 7)
    a_slice = st.builds(slice, bound, bound, st.none() | st.integers(-3, 3).filter(bool))
    return st.one_of(a_slice, st.integers(-n, n - 1)) if n else a_slice


@st.composite
def basic_indexings(draw):
    """A shape and a numpy basic index for it: ints, slices, None and at most one '...'."""
    dims = tuple(draw(st.lists(st.integers(0, 5), max_size=4)))
    lead = draw(st.integers(0, len(dims)))
    ellipsis = draw(st.booleans())
    trail = draw(st.integers(0, len(dims) - lead)) if ellipsis else 0
    items = [draw(_axis_index(n)) for n in dims[:lead]] + ([Ellipsis] if ellipsis else []) + \
        [draw(_axis_index(n)) for n in dims[len(dims) - trail:]]
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return dims, items[0] if len(items) == 1 and draw(st.booleans()) else tuple(items)


@settings(max_examples=300, deadline=None)
@given(basic_indexings())
def test_getitem_is_numpy_basic_indexing(case):
    dims, index = case
    g, got, want = index_and_evaluate(dims, index)
    np.testing.assert_array_equal(got, want)
    kinds = [n.kind for n in g.nodes[1:]]
    assert kinds in ([], ["slice"], ["reshape"], ["slice", "reshape"]), kinds


@pytest.mark.parametrize("dims, index, kinds", [
    ((3, 4), (slice(None), slice(1, 3)), ["slice"]),
    ((3, 4), (None, Ellipsis), ["reshape"]),
    ((3, 4), Ellipsis, []),
    ((3, 4), (slice(None), slice(None, None, 1)), []),
    ((), (), []),
    ((), None, ["reshape"]),
    ((3, 4, 5), (-1, Ellipsis, np.int64(2)), ["slice", "reshape"]),
    ((2, 3), (np.array(1),), ["slice", "reshape"]),
])
def test_getitem_adds_only_the_nodes_it_needs(dims, index, kinds):
    g, got, want = index_and_evaluate(dims, index)
    np.testing.assert_array_equal(got, want)
    assert [n.kind for n in g.nodes[1:]] == kinds


def test_getitem_without_nodes_returns_the_value_itself():
    g = Graph("same")
    x = g.input("x", (2, 3))
    assert x[...] == x and x[:, :] == x and x[::1, ...] == x and len(g) == 1


@pytest.mark.parametrize("index, error, match", [
    (3, ShapeError, r"index 3 is out of range for axis 0 of size 3"),
    ((0, -5), ShapeError, r"index -5 is out of range for axis 1 of size 4"),
    ((0, 0, 0), ShapeError, r"too many indices: 3 for \[3, 4\]"),
    ((Ellipsis, 0, Ellipsis), OpAttributeError, r"single ellipsis"),
    (1.0, OpAttributeError, r"cannot index with float"),
    ([0, 1], OpAttributeError, r"use g.gather"),
    (True, OpAttributeError, r"cannot index with bool"),
    (np.array([0, 1]), OpAttributeError, r"cannot index with ndarray"),
    (slice(0, 2, 0), OpAttributeError, r"bad slice .* for axis 0: slice step cannot be zero"),
    (slice(0.5, 2), OpAttributeError, r"bad slice"),
])
def test_getitem_errors(index, error, match):
    g = Graph("errors")
    x = g.input("x", (3, 4))
    with pytest.raises(error, match=match):
        x[index]


def test_tensor_index_is_refused_with_a_pointer_to_gather():
    g = Graph("errors")
    x, i = g.input("x", (3, 4)), g.input("i", (2,), "i32")
    with pytest.raises(OpAttributeError, match=r"cannot index with Value.*g.gather"):
        x[i]

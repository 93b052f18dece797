"""The 'movement' family checked against onnxruntime, torch and numpy's own slicing, plus
its build-time and run-time errors and canonical attributes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlx_core.errors import DTypeError, GraphError, InputError, OpAttributeError, ShapeError
from rlx_core.ir import Graph
from rlx_core.reference import evaluate

BIG = np.iinfo(np.int64).max


def rng(seed=0):
    return np.random.default_rng(seed)


def data(dims, dtype=np.float32, seed=0):
    return rng(seed).standard_normal(dims).astype(dtype)


def i64(values):
    return np.array(values, np.int64)


# --- onnxruntime ------------------------------------------------------------------------
SLICES = [  # starts, stops, steps, axes
    ([1, 0], [3, 4], [1, 2], [0, 2]),
    ([-1], [-BIG], [-1], [1]),
    ([-2, 10], [-100, -100], [-2, -3], [0, 2]),
    ([-100, 2], [100, BIG], [1, 1], [1, 0]),
    ([3, 0, 4], [1, 5, 3], [1, 1, -1], [0, 1, 2]),
    ([0], [5], [7], [-1]),
]


@pytest.mark.parametrize("starts, stops, steps, axes", SLICES)
def test_slice_matches_onnxruntime(starts, stops, steps, axes, onnx_node, reference):
    x = data((4, 5, 6))
    want, = onnx_node("Slice", {"x": x, "starts": i64(starts), "ends": i64(stops), "axes": i64(axes),
                                "steps": i64(steps)})
    np.testing.assert_array_equal(reference(lambda g, x: g.slice(x, starts, stops, steps, axes), x), want)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("pads", [[(1, 2), (0, 3)], [(2, 2), (3, 3)], [(-1, -2), (0, -3)], [(-1, 2), (2, -1)]])
def test_pad_matches_onnxruntime(mode, pads, onnx_node, reference):
    x = data((5, 4))
    onnx_pads = i64([b for b, _ in pads] + [a for _, a in pads])  # ONNX: all befores, then all afters
    want, = onnx_node("Pad", {"x": x, "pads": onnx_pads, "value": np.array(1.5, np.float32)}, mode=mode)
    np.testing.assert_array_equal(reference(lambda g, x: g.pad(x, pads, mode, value=1.5), x), want)


@pytest.mark.parametrize("axis, idx_dims", [(0, (2, 3)), (1, (4,)), (-1, ()), (2, (0,))])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_matches_onnxruntime(axis, idx_dims, idx_dtype, onnx_node, reference):
    x = data((3, 4, 5))
    n = x.shape[axis]
    idx = rng(1).integers(-n, n, idx_dims).astype(idx_dtype)  # negative indices count from the end
    want, = onnx_node("Gather", {"x": x, "i": idx}, axis=axis)
    np.testing.assert_array_equal(reference(lambda g, x, i: g.gather(x, i, axis), x, idx), want)


@pytest.mark.parametrize("axis, idx_dims", [(0, (5, 4)), (1, (2, 7)), (-1, (3, 1))])
def test_gather_elements_matches_onnxruntime(axis, idx_dims, onnx_node, reference):
    x = data((3, 4))
    n = x.shape[axis]
    idx = rng(2).integers(-n, n, idx_dims).astype(np.int64)
    want, = onnx_node("GatherElements", {"x": x, "i": idx}, axis=axis)
    np.testing.assert_array_equal(reference(lambda g, x, i: g.gather_elements(x, i, axis), x, idx), want)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_add_matches_onnxruntime_scatter_elements(dtype, axis, onnx_node, reference):
    d = data((4, 5, 3), dtype)
    n = d.shape[axis]
    idx = rng(3).integers(-n, n, 7).astype(np.int64)  # 7 > n: repeated indices must accumulate
    upd_dims = list(d.shape)
    upd_dims[axis] = len(idx)
    upd = data(upd_dims, dtype, seed=4) if dtype is np.float32 else rng(4).integers(-9, 9, upd_dims).astype(dtype)
    # ScatterElements takes one index per update element: broadcast the 1-D list along axis.
    shape = [1] * d.ndim
    shape[axis] = len(idx)
    full_idx = np.broadcast_to(idx.reshape(shape), upd.shape).copy()
    want, = onnx_node("ScatterElements", {"d": d, "i": full_idx, "u": upd}, axis=axis, reduction="add")
    got = reference(lambda g, d, i, u: g.scatter_add(d, i, u, axis), d, idx, upd)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_concat_split_expand_transpose_reshape_match_onnxruntime(onnx_node, reference):
    a, b = data((2, 3, 4)), data((2, 1, 4), seed=1)
    np.testing.assert_array_equal(reference(lambda g, a, b: g.concat([a, b, a], -2), a, b),
                                  onnx_node("Concat", {"a": a, "b": b, "c": a}, axis=-2)[0])
    want = onnx_node("Split", {"x": a, "sizes": i64([1, 0, 3])}, 3, axis=2)
    for got_part, want_part in zip(reference(lambda g, x: g.split(x, [1, 0, 3], 2), a), want):
        np.testing.assert_array_equal(got_part, want_part)
    np.testing.assert_array_equal(reference(lambda g, x: g.expand(x, (5, 2, 3, 4)), b),
                                  onnx_node("Expand", {"x": b, "dims": i64([5, 2, 3, 4])})[0])
    np.testing.assert_array_equal(reference(lambda g, x: g.transpose(x, (1, -1, 0)), a),
                                  onnx_node("Transpose", {"x": a}, perm=[1, 2, 0])[0])
    np.testing.assert_array_equal(reference(lambda g, x: g.reshape(x, (4, -1, 3)), a),
                                  onnx_node("Reshape", {"x": a, "dims": i64([4, -1, 3])})[0])


# --- torch ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_scatter_add_matches_torch_index_add(dtype, reference, torch):
    d = rng().integers(-5, 5, (6, 4)).astype(dtype)
    idx = i64([5, 0, 5, 2, 5, 0, 1])  # torch.index_add takes no negative indices
    upd = rng(1).integers(-5, 5, (7, 4)).astype(dtype)
    want = torch.from_numpy(d).index_add(0, torch.from_numpy(idx), torch.from_numpy(upd)).numpy()
    np.testing.assert_array_equal(reference(lambda g, d, i, u: g.scatter_add(d, i, u), d, idx, upd), want)


def test_gather_elements_matches_torch_gather(reference, torch):
    x = data((3, 5, 4))
    idx = rng().integers(0, 5, (2, 6, 3)).astype(np.int64)
    want = torch.gather(torch.from_numpy(x), 1, torch.from_numpy(idx)).numpy()
    np.testing.assert_array_equal(reference(lambda g, x, i: g.gather_elements(x, i, 1), x, idx), want)


@pytest.mark.parametrize("mode, torch_mode", [("reflect", "reflect"), ("edge", "replicate"),
                                              ("constant", "constant")])
def test_pad_matches_torch(mode, torch_mode, reference, torch):
    x = data((2, 3, 5, 6))
    pads = [(0, 0), (0, 0), (1, 4), (3, 2)]
    torch_pads = (3, 2, 1, 4)  # torch lists the last axis first
    want = torch.nn.functional.pad(torch.from_numpy(x), torch_pads, mode=torch_mode).numpy()
    np.testing.assert_array_equal(reference(lambda g, x: g.pad(x, pads, mode), x), want)


def test_embedding_lookup_matches_torch(reference, torch):
    table = data((10, 4))
    ids = rng().integers(0, 10, (2, 5)).astype(np.int32)
    want = torch.nn.functional.embedding(torch.from_numpy(ids).long(), torch.from_numpy(table)).numpy()
    np.testing.assert_array_equal(reference(lambda g, t, i: g.gather(t, i), table, ids), want)


# --- numpy's slicing, on random slices --------------------------------------------------
@st.composite
def slicings(draw):
    dims = tuple(draw(st.lists(st.integers(0, 6), min_size=0, max_size=3)))
    bound = st.one_of(st.integers(-9, 9), st.sampled_from([-BIG, BIG]))
    chosen = draw(st.permutations(range(len(dims))))[:draw(st.integers(0, len(dims)))]
    parts = [(draw(bound), draw(bound), draw(st.integers(-4, 4).filter(bool))) for _ in chosen]
    return dims, list(chosen), parts


@settings(max_examples=200, deadline=None)
@given(slicings())
def test_slice_is_numpy_slicing(case):
    dims, axes, parts = case
    x = np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims)
    index = [slice(None)] * len(dims)
    for ax, (start, stop, step) in zip(axes, parts):
        index[ax] = slice(start, stop, step)
    g = Graph("slice")
    y = g.slice(g.input("x", dims, "i32"), [p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], axes)
    g.set_outputs([y])
    np.testing.assert_array_equal(evaluate(g, {"x": x})[0], x[tuple(index)])


# --- errors and canonical attributes ----------------------------------------------------
def _graph(*shapes):
    g = Graph("errors")
    return g, [g.input(f"x{i}", dims, dt) for i, (dims, dt) in enumerate(shapes)]


F = "f32"


@pytest.mark.parametrize("build, shapes, error, match", [
    (lambda g, x: g.reshape(x, (-1, -1)), [((2, 3), F)], ShapeError, r"%1 reshape.*except one -1"),
    (lambda g, x: g.reshape(x, (4, 2)), [((2, 3), F)], ShapeError,
     r"cannot reshape \[2, 3\] \(6 elements\) into \[4, 2\]"),
    (lambda g, x: g.reshape(x, (0, -1)), [((0, 3), F)], ShapeError, r"no size for -1 fits"),
    (lambda g, x: g.reshape(x, (4, -1)), [((2, 3), F)], ShapeError, r"no size for -1 fits"),
    (lambda g, x: g.transpose(x, (0, 0, 1)), [((2, 3, 4), F)], ShapeError, r"not a permutation"),
    (lambda g, x: g.transpose(x, (0, 1)), [((2, 3, 4), F)], ShapeError, r"not a permutation"),
    (lambda g, x: g.transpose(x, (0, 3)), [((2, 3), F)], ShapeError, r"perm entry 3 is out of range"),
    (lambda g, x: g.slice(x, [0], [2], [0]), [((4,), F)], OpAttributeError, r"steps must not be 0"),
    (lambda g, x: g.slice(x, [0, 1], [2]), [((4, 4), F)], OpAttributeError, r"2 starts, 1 stops"),
    (lambda g, x: g.slice(x, [0, 0, 0], [1, 1, 1]), [((4, 4), F)], ShapeError, r"3 axes given for \[4, 4\]"),
    (lambda g, x: g.slice(x, [0, 0], [1, 1], axes=[1, -1]), [((4, 4), F)], ShapeError, r"repeat an axis"),
    (lambda g, x: g.slice(x, [0], [1], axes=[2]), [((4, 4), F)], ShapeError, r"slice axis 2 is out of range"),
    (lambda g: g.concat([]), [], ShapeError, r"at least one input"),
    (lambda g, a, b: g.concat([a, b]), [((2,), F), ((2,), "f16")], DTypeError, r"equal dtypes"),
    (lambda g, a, b: g.concat([a, b], 1), [((2, 3), F), ((3, 3), F)], ShapeError, r"equal dims elsewhere"),
    (lambda g, a, b: g.concat([a, b]), [((2, 3), F), ((2, 3, 1), F)], ShapeError, r"equal dims elsewhere"),
    (lambda g, a: g.concat([a, a]), [((), F)], ShapeError, r"axis 0 is out of range for rank 0"),
    (lambda g, x: g.split(x, [1, 1]), [((3,), F)], ShapeError, r"add up to 3"),
    (lambda g, x: g.split(x, [4, -1]), [((3,), F)], ShapeError, r"must be >= 0"),
    (lambda g, x: g.split(x, []), [((3,), F)], ShapeError, r"split sizes \[\]"),
    (lambda g, x: g.expand(x, (2, 4)), [((3,), F)], ShapeError, r"cannot expand \[3\] to \[2, 4\]"),
    (lambda g, x: g.expand(x, (3,)), [((1, 3), F)], ShapeError, r"cannot expand"),
    (lambda g, x: g.expand(x, (-1, 3)), [((3,), F)], ShapeError, r"cannot expand"),
    (lambda g, x: g.op("pad", x, pads=(1, 1)), [((2, 2), F)], ShapeError, r"each of the 2 axes"),
    (lambda g, x: g.pad(x, [(1, 1)], "wrap"), [((2,), F)], OpAttributeError, r"constant, reflect, edge"),
    (lambda g, x: g.pad(x, [(-2, -2)]), [((3,), F)], ShapeError, r"crops more than the 3 elements"),
    (lambda g, x: g.pad(x, [(3, 0)], "reflect"), [((3,), F)], ShapeError, r"each pad <= 2"),
    (lambda g, x: g.pad(x, [(-1, 2)], "reflect"), [((3,), F)], ShapeError, r"each pad <= 1"),
    (lambda g, x: g.pad(x, [(1, 0)], "edge"), [((0,), F)], ShapeError, r"no element to repeat"),
    (lambda g, x: g.pad(x, [1, 1]), [((3,), F)], OpAttributeError, r"\(before, after\) pairs"),
    (lambda g, t, i: g.gather(t, i), [((3,), F), ((2,), F)], DTypeError, r"gather indices must be one of i32, i64"),
    (lambda g, t, i: g.gather(t, i, 1), [((3,), F), ((2,), "i32")], ShapeError, r"gather axis 1 is out of range"),
    (lambda g, x, i: g.gather_elements(x, i), [((3, 2), F), ((3,), "i64")], ShapeError, r"must have the rank"),
    (lambda g, x, i: g.gather_elements(x, i), [((3, 2), F), ((3, 3), "i64")], ShapeError, r"no larger size"),
    (lambda g, d, i, u: g.scatter_add(d, i, u), [((3,), F), ((2, 1), "i32"), ((2,), F)], ShapeError, r"must be 1-D"),
    (lambda g, d, i, u: g.scatter_add(d, i, u), [((3, 2), F), ((2,), "i32"), ((2, 3), F)], ShapeError,
     r"updates must have dims \[2, 2\]"),
    (lambda g, d, i, u: g.scatter_add(d, i, u), [((3,), F), ((2,), "i32"), ((2,), "f64")], DTypeError,
     r"equal dtypes"),
    (lambda g, x: g.squeeze(x, 0), [((2, 1), F)], ShapeError, r"squeeze axis 0 of \[2, 1\] has size 2"),
    (lambda g, x: g.unsqueeze(x, (1, -2)), [((2,), F)], ShapeError, r"repeat an axis"),
    (lambda g, x: g.flatten(x, 2, 1), [((2, 3, 4), F)], ShapeError, r"start 2 comes after end 1"),
])
def test_build_errors(build, shapes, error, match):
    g, xs = _graph(*shapes)
    with pytest.raises(error, match=match):
        build(g, *xs)
    assert issubclass(error, GraphError)


@pytest.mark.parametrize("build, n", [
    (lambda g, t, i: g.gather(t, i), 4),
    (lambda g, t, i: g.gather_elements(t, g.reshape(i, (2, 1)), 0), 4),
    (lambda g, t, i: g.scatter_add(t, i, g.constant(np.ones((2, 3), np.float32))), 4),
])
@pytest.mark.parametrize("bad", [4, -5, 100])
def test_reference_refuses_out_of_range_indices(build, n, bad):
    g = Graph("oob")
    t, i = g.input("t", (n, 3)), g.input("i", (2,), "i64")
    g.set_outputs([build(g, t, i)])
    with pytest.raises(InputError, match=rf"index {bad} is out of range for axis 0 of size 4 \(valid: -4\.\.3\)"):
        evaluate(g, {"t": np.zeros((n, 3), np.float32), "i": i64([0, bad])})


def test_attributes_are_canonicalized():
    g, (x,) = _graph(((4, 5, 6), F))
    assert g.transpose(x).node.attrs["perm"] == (2, 1, 0)
    assert g.transpose(x, (-1, 0, 1)).node.attrs["perm"] == (2, 0, 1)
    assert g.reshape(x, (-1, 3)).node.attrs["dims"] == (40, 3)
    s = g.slice(x, [-1, 100], [-BIG, -BIG], [-1, -2], axes=[2, 0]).node.attrs
    assert (s["starts"], s["stops"], s["steps"], s["axes"]) == ((3, 0, 5), (-5, 5, -7), (-2, 1, -1), (0, 1, 2))
    assert g.slice(x, [3], [1]).node.attrs["starts"][0] == 0 and g.slice(x, [3], [1]).dims == (0, 5, 6)
    assert g.pad(x, [(1, -1), (0, 0), (2, 3)]).node.attrs["pads"] == (1, -1, 0, 0, 2, 3)
    assert g.concat([x, x], -1).node.attrs["axis"] == 2
    assert [p.dims for p in g.split(x, [2, 3], -2)] == [(4, 2, 6), (4, 3, 6)]


def test_value_methods_build_movement_nodes():
    g, (x,) = _graph(((2, 3, 4), F))
    assert x.T.node.attrs["perm"] == (2, 1, 0)
    assert x.reshape(4, -1).dims == x.reshape((4, -1)).dims == (4, 6)

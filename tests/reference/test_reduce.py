"""The 'reduce' family checked against onnxruntime and torch, plus its build-time errors
and canonical attributes."""
from __future__ import annotations

import numpy as np
import pytest

from rlx_core.errors import DTypeError, OpAttributeError, ShapeError
from rlx_core.ir import DType, Graph
from rlx_core.ir.ops.reduce import REDUCTIONS
from rlx_core.testing import assert_close

ONNX_REDUCE = {"reduce_sum": "ReduceSum", "reduce_mean": "ReduceMean", "reduce_prod": "ReduceProd",
               "reduce_max": "ReduceMax", "reduce_min": "ReduceMin"}


def rng(seed=0):
    return np.random.default_rng(seed)


def reduce_with(kind, axes=None, keepdims=False):
    return lambda g, x: getattr(g, REDUCTIONS[kind][0])(x, axes, keepdims)


def tied(dims, dtype=np.float32, seed=0):
    """Small integers, so that equal values (ties) occur often."""
    return rng(seed).integers(-2, 3, dims).astype(dtype)


# --- onnxruntime ------------------------------------------------------------------------
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axes", [None, (1,), (0, -1), ()])
@pytest.mark.parametrize("kind", sorted(ONNX_REDUCE))
def test_reductions_match_onnxruntime(kind, axes, keepdims, onnx_node, reference):
    x = rng().uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    feeds = {"x": x} if axes is None else {"x": x, "axes": np.array(axes, np.int64)}
    # ONNX reduces every axis when axes is absent; an empty list reduces none only with this flag.
    want, = onnx_node(ONNX_REDUCE[kind], feeds, keepdims=int(keepdims), noop_with_empty_axes=int(axes == ()))
    assert_close(reference(reduce_with(kind, axes, keepdims), x), want, "f32")


@pytest.mark.parametrize("kind", sorted(set(ONNX_REDUCE) - {"reduce_mean"}))  # mean: floats only
def test_integer_reductions_match_onnxruntime(kind, onnx_node, reference):
    x = rng().integers(-3, 4, (4, 6)).astype(np.int32)
    want, = onnx_node(ONNX_REDUCE[kind], {"x": x, "axes": np.array([1], np.int64)}, keepdims=0)
    np.testing.assert_array_equal(reference(reduce_with(kind, 1), x), want)


@pytest.mark.parametrize("kind, onnx_op", [("argmax", "ArgMax"), ("argmin", "ArgMin")])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("axis, keepdims", [(0, True), (1, False), (-1, False), (-1, True)])
def test_arg_extrema_with_ties_match_onnxruntime(kind, onnx_op, dtype, axis, keepdims, onnx_node, reference):
    x = tied((4, 5, 6), dtype)
    want, = onnx_node(onnx_op, {"x": x}, axis=axis, keepdims=int(keepdims), select_last_index=0)
    got = reference(lambda g, x: getattr(g, kind)(x, axis, keepdims), x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind, onnx_op", [("softmax", "Softmax"), ("log_softmax", "LogSoftmax")])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_matches_onnxruntime(kind, onnx_op, axis, onnx_node, reference):
    x = (30 * rng().standard_normal((3, 4, 5))).astype(np.float32)
    want, = onnx_node(onnx_op, {"x": x}, axis=axis)
    assert_close(reference(lambda g, x: getattr(g, kind)(x, axis), x), want, "f32")


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum_matches_onnxruntime(dtype, exclusive, reverse, axis, onnx_node, reference):
    x = rng().integers(-9, 10, (4, 6)).astype(dtype) if dtype is np.int32 else \
        rng().standard_normal((4, 6)).astype(dtype)
    want, = onnx_node("CumSum", {"x": x, "axis": np.array(axis, np.int64)},
                      exclusive=int(exclusive), reverse=int(reverse))
    got = reference(lambda g, x: g.cumsum(x, axis, exclusive, reverse=reverse), x)
    assert_close(got, want, "f32" if dtype is np.float32 else "i32")


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis, k", [(-1, 3), (0, 2), (1, 5), (-1, 0)])
def test_topk_with_ties_matches_onnxruntime(dtype, largest, axis, k, onnx_node, reference):
    # ONNX TopK with sorted=1 is specified exactly as ours: best first, ties by lower index.
    x = tied((4, 5, 6), dtype, seed=k)
    want = onnx_node("TopK", {"x": x, "k": np.array([k], np.int64)}, 2, axis=axis, largest=int(largest), sorted=1)
    got = reference(lambda g, x: g.topk(x, k, axis, largest), x)
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e)


def test_unsorted_topk_selects_what_onnxruntime_selects(onnx_node, reference):
    # ONNX leaves the order of sorted=0 open; ours is index order. Compare the chosen sets.
    x = rng().permutation(60).reshape(3, 20).astype(np.float32)
    want_vals, want_idx = onnx_node("TopK", {"x": x, "k": np.array([7], np.int64)}, 2, axis=1, sorted=0)
    vals, idx = reference(lambda g, x: g.topk(x, 7, sorted=False), x)
    np.testing.assert_array_equal(idx, np.sort(want_idx, axis=1))
    np.testing.assert_array_equal(vals, np.take_along_axis(x, idx, 1))
    assert (np.diff(idx, axis=1) > 0).all()


# --- torch ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


NAN, INF = np.nan, np.inf
WITH_NAN = np.array([[1, NAN, 3, NAN, 9], [INF, 2, -INF, 7, 0], [-INF, -INF, -INF, -INF, -INF]], np.float32)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_arg_extrema_with_nan_match_torch(kind, reference, torch):
    want = getattr(torch, kind)(torch.from_numpy(WITH_NAN), dim=1).numpy()
    np.testing.assert_array_equal(reference(lambda g, x: getattr(g, kind)(x, 1), WITH_NAN), want)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_nan_and_inf_matches_torch(largest, reference, torch):
    want = torch.topk(torch.from_numpy(WITH_NAN[:2]), 3, dim=1, largest=largest)
    vals, idx = reference(lambda g, x: g.topk(x, 3, largest=largest), WITH_NAN[:2])
    np.testing.assert_array_equal(vals, want.values.numpy())
    np.testing.assert_array_equal(idx, want.indices.numpy())  # no ties among the kept values


@pytest.mark.parametrize("kind, fn", [("reduce_max", "amax"), ("reduce_min", "amin")])
def test_extrema_propagate_nan_like_torch(kind, fn, reference, torch):
    want = getattr(torch, fn)(torch.from_numpy(WITH_NAN), dim=1).numpy()
    np.testing.assert_array_equal(reference(reduce_with(kind, 1), WITH_NAN), want)


@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["f32", "f64", "f16", "bf16"])
def test_softmax_matches_torch(kind, dtype, reference, torch):
    # Large magnitudes (the naive formula overflows), -inf masks, and an all -inf row (nan).
    x = (80 * rng().standard_normal((4, 7))).astype(np.float64)
    x[1, :3] = -INF
    x[3, :] = -INF
    x = x.astype(DType.of(dtype).np)
    want = getattr(torch, kind)(_to_torch(torch, x).double(), dim=-1)
    got = reference(lambda g, x: getattr(g, kind)(x), x)
    assert_close(got, want.numpy().astype(x.dtype), dtype)


@pytest.mark.parametrize("kind, fn", [("reduce_sum", "sum"), ("reduce_prod", "prod"), ("reduce_mean", "mean")])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_low_float_reductions_match_torch(kind, fn, dtype, reference, torch):
    x = rng().uniform(0.8, 1.25, (6, 40)).astype(DType.of(dtype).np)
    want = getattr(torch, fn)(_to_torch(torch, x).float(), dim=1)  # accumulate in f32, round once
    assert_close(reference(reduce_with(kind, 1), x), want.numpy().astype(x.dtype), dtype)


def test_integer_sums_wrap_like_torch(reference, torch):
    x = rng().integers(60, 128, (3, 9)).astype(np.int8)
    t = torch.from_numpy(x)
    got = reference(lambda g, x: [g.sum(x, 1), g.prod(x, 1), g.cumsum(x, 1)], x)
    want = [fn(t, 1, dtype=torch.int8) for fn in (torch.sum, torch.prod, torch.cumsum)]
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e.numpy())


@pytest.mark.parametrize("kind, fn", [("reduce_sum", "sum"), ("reduce_prod", "prod"), ("reduce_mean", "mean")])
def test_empty_reductions_match_torch(kind, fn, reference, torch):
    x = np.zeros((0, 3), np.float32)
    want = getattr(torch, fn)(torch.from_numpy(x), dim=0).numpy()
    np.testing.assert_array_equal(reference(reduce_with(kind, 0), x), want)  # 0, 1, nan


def test_bool_extrema_are_any_and_all(reference, torch):
    x = rng().random((5, 3)) < 0.3
    t = torch.from_numpy(x)
    got = reference(lambda g, x: [g.reduce_max(x, 0), g.reduce_min(x, 0), g.argmax(x, 0)], x)
    np.testing.assert_array_equal(got[0], torch.amax(t, 0).numpy())
    np.testing.assert_array_equal(got[1], torch.amin(t, 0).numpy())
    np.testing.assert_array_equal(got[2], torch.argmax(t.to(torch.uint8), 0).numpy())


def _to_torch(torch, x):
    """torch tensor of x's values (torch cannot read ml_dtypes' bfloat16: go through f32)."""
    if x.dtype == DType.BF16.np:
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(x)


# --- build-time errors and canonical attributes -----------------------------------------
def _graph(dims=(3, 5), dtype="f32"):
    g = Graph("errors")
    return g, g.input("x", dims, dtype)


@pytest.mark.parametrize("build, dims, dtype, error, match", [
    (lambda g, x: g.reduce_max(x, 0), (0, 3), "f32", ShapeError, r"%1 reduce_max.*axis 0 of size 0"),
    (lambda g, x: g.argmin(x, 1), (2, 0), "f32", ShapeError, r"argmin over axis 1 of size 0"),
    (lambda g, x: g.sum(x, (0, -2)), (3, 5), "f32", ShapeError, r"repeat an axis"),
    (lambda g, x: g.mean(x, 2), (3, 5), "f32", ShapeError, r"axes 2 is out of range for rank 2"),
    (lambda g, x: g.sum(x), (3,), "bool", DTypeError, r"reduce_sum does not accept bool"),
    (lambda g, x: g.mean(x), (3,), "i32", DTypeError, r"reduce_mean does not accept i32"),
    (lambda g, x: g.softmax(x), (3,), "i64", DTypeError, r"softmax does not accept i64"),
    (lambda g, x: g.reduce_max(x), (3,), "c64", DTypeError, r"reduce_max does not accept c64"),
    (lambda g, x: g.topk(x, 6), (3, 5), "f32", ShapeError, r"k=6 must be in 0\.\.5"),
    (lambda g, x: g.topk(x, -1), (3, 5), "f32", ShapeError, r"k=-1 must be in 0\.\.5"),
    (lambda g, x: g.topk(x, 2.5), (3, 5), "f32", OpAttributeError, r"attribute 'k': expected an integer"),
    (lambda g, x: g.argmax(x), (), "f32", ShapeError, r"axis -1 is out of range for rank 0"),
    (lambda g, x: g.cumsum(x, 2), (3, 5), "f32", ShapeError, r"axis 2 is out of range for rank 2"),
    (lambda g, x: g.op("cumsum", x), (3, 5), "f32", OpAttributeError, r"needs attribute 'axis'"),
    (lambda g, x: g.sum(x, keepdims="yes"), (3, 5), "f32", OpAttributeError, r"'keepdims': expected True or False"),
])
def test_build_errors(build, dims, dtype, error, match):
    g, x = _graph(dims, dtype)
    with pytest.raises(error, match=match):
        build(g, x)


def test_attributes_are_canonicalized():
    g, x = _graph((2, 3, 4))
    assert g.sum(x).node.attrs["axes"] == (0, 1, 2)
    assert g.mean(x, (-1, 0), keepdims=True).node.attrs["axes"] == (0, 2)
    assert g.reduce_max(x, -2).dims == (2, 4)
    assert g.softmax(x).node.attrs["axis"] == 2
    assert x.sum().dims == () and x.mean(-1, keepdims=True).node.attrs["axes"] == (2,)
    vals, idx = g.topk(x, 2, axis=-2)
    assert vals.node.attrs["axis"] == 1 and vals.dims == idx.dims == (2, 2, 4) and idx.dtype.value == "i64"

"""if / while / scan against onnxruntime running the equivalent ONNX If, Loop and Scan
models (built with onnx.helper), on the reference interpreter and the CPU backend."""
import numpy as np
import pytest

from rlx_core import Graph, Session, evaluate
from rlx_core.testing.external import run_onnx_graph

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

ort.set_default_logger_severity(3)
F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
RNG = np.random.default_rng(3)


def _vi(name, elem, dims=None):
    return helper.make_tensor_value_info(name, elem, dims)


def _ort(nodes, outputs, feeds):
    return run_onnx_graph(nodes, feeds, outputs, opset=17)


def _both(g, feeds):
    """The graph's outputs on the reference and on the CPU backend (which must agree)."""
    ref = evaluate(g, feeds)
    cpu = Session("cpu").compile(g).run(feeds)
    for a, b in zip(ref, cpu):
        np.testing.assert_array_equal(a, b)
    return ref


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value), name))


def test_if_matches_onnx_if():
    # then: (x * 2, x + y); else: (-x, x * y). ONNX branches capture x, y implicitly.
    then_g = helper.make_graph([_const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["t0"]),
                                helper.make_node("Add", ["x", "y"], ["t1"])], "then", [],
                               [_vi("t0", F, [2, 3]), _vi("t1", F, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e0"]), helper.make_node("Mul", ["x", "y"], ["e1"])],
                               "else", [], [_vi("e0", F, [2, 3]), _vi("e1", F, [2, 3])])
    node = helper.make_node("If", ["p"], ["o0", "o1"], then_branch=then_g, else_branch=else_g)
    g = Graph("if")
    p, x, y = g.input("p", (), "bool"), g.input("x", (2, 3)), g.input("y", (2, 3))
    g.set_outputs(list(g.cond(p, lambda s, a, b: (s.mul(a, 2.0), s.add(a, b)),
                              lambda s, a, b: (s.neg(a), s.mul(a, b)), [x, y])))
    for flag in (True, False):
        feeds = {"p": np.array(flag), "x": RNG.standard_normal((2, 3)).astype(np.float32),
                 "y": RNG.standard_normal((2, 3)).astype(np.float32)}
        want = _ort([node], ["o0", "o1"], feeds)
        for a, b in zip(_both(g, feeds), want):
            np.testing.assert_array_equal(a, b)


def _loop_model(with_trip_count):
    """ONNX Loop: carried (a scalar, b [3]); body: a' = a * 1.5, b' = b + a, cond' = a' < 20."""
    body = helper.make_graph(
        [_const("k", np.float32(1.5)), _const("limit", np.float32(20)),
         helper.make_node("Mul", ["a_in", "k"], ["a_out"]), helper.make_node("Add", ["b_in", "a_in"], ["b_out"]),
         helper.make_node("Less", ["a_out", "limit"], ["cond_out"])],
        "body", [_vi("iter", I64, []), _vi("cond_in", B, []), _vi("a_in", F, []), _vi("b_in", F, [3])],
        [_vi("cond_out", B, []), _vi("a_out", F, []), _vi("b_out", F, [3])])
    return helper.make_node("Loop", ["M" if with_trip_count else "", "c0", "a0", "b0"], ["a", "b"], body=body)


@pytest.mark.parametrize("trip_count", [None, 0, 2, 4])
def test_while_matches_onnx_loop(trip_count):
    # RLX: the loop condition is the ONNX cond carried along; the trip count is max_iterations.
    g = Graph("loop")
    c0, a0, b0 = g.input("c0", (), "bool"), g.input("a0", ()), g.input("b0", (3,))
    _, a, b = g.while_loop(lambda s, c, a, b: c,
                           lambda s, c, a, b: (s.lt(s.mul(a, 1.5), 20.0), s.mul(a, 1.5), s.add(b, a)),
                           [c0, a0, b0], max_iterations=trip_count)
    g.set_outputs([a, b])
    for a_start, go in ((0.7, True), (3.0, True), (19.0, True), (1.0, False)):
        feeds = {"c0": np.array(go), "a0": np.array(a_start, np.float32),
                 "b0": RNG.standard_normal(3).astype(np.float32)}
        onnx_feeds = dict(feeds, **({} if trip_count is None else {"M": np.array(trip_count, np.int64)}))
        want = _ort([_loop_model(trip_count is not None)], ["a", "b"], onnx_feeds)
        for got, exp in zip(_both(g, feeds), want):
            np.testing.assert_array_equal(got, exp)


def _scan_model(reverse):
    """ONNX Scan: state s [2], scan input x_t [2]; s' = s + x_t, y_t = s' * x_t."""
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])],
                             "body", [_vi("s_in", F, [2]), _vi("x_t", F, [2])],
                             [_vi("s_out", F, [2]), _vi("y_t", F, [2])])
    direction = [1] if reverse else [0]
    return helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=direction, scan_output_directions=direction)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("steps", [1, 6])  # (onnxruntime rejects length-0 scans; tests/test_subgraph.py has them)
def test_scan_matches_onnx_scan(reverse, steps):
    # ONNX's reversed scan with a reversed output direction stores y_t at t: RLX's reverse.
    g = Graph("scan")
    s0, xs = g.input("s0", (2,)), g.input("xs", (steps, 2))
    s, ys = g.scan(lambda b, c, x: (b.add(c, x), b.mul(b.add(c, x), x)), s0, xs, reverse=reverse)
    g.set_outputs([s, ys])
    feeds = {"s0": RNG.standard_normal(2).astype(np.float32),
             "xs": RNG.standard_normal((steps, 2)).astype(np.float32)}
    want = _ort([_scan_model(reverse)], ["s", "ys"], feeds)
    for got, exp in zip(_both(g, feeds), want):
        np.testing.assert_array_equal(got, exp)

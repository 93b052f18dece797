"""Control flow: the if / while / scan ops' build-time checks and semantics (rng per
iteration, nesting, serialization, precision policies), and the host-driven helpers
run_if / run_while over compiled graphs."""
import numpy as np
import pytest

from rlx_core import Graph, RngOptions, Session, evaluate
from rlx_core.errors import DTypeError, GraphError, InputError, OpAttributeError, RlxError, ShapeError
from rlx_core.runtime.subgraph import run_if, run_while

F32 = np.float32


def _graph(name, shapes, body):
    """A standalone graph with inputs ``shapes`` ({name: (dims, dtype)}) and outputs ``body(g, *inputs)``."""
    g = Graph(name)
    ins = [g.input(n, dims, dt) for n, (dims, dt) in shapes.items()]
    out = body(g, *ins)
    g.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    return g


# --- the ops -------------------------------------------------------------------------

def test_if_while_scan_semantics_on_cpu_and_reference():
    g = Graph("main")
    x, p = g.input("x", (3,)), g.input("p", (), "bool")
    chosen = g.cond(p, lambda s, v: s.mul(v, 2.0), lambda s, v: s.neg(v), [x])
    total, steps = g.while_loop(lambda s, v, i: s.lt(i, 4), lambda s, v, i: (s.add(v, v), s.add(i, 1)),
                                [x, g.constant(np.int32(0))])
    carry, ys = g.scan(lambda s, c, xt: (s.add(c, xt), s.mul(c, xt)), g.constant(F32(1)), x, reverse=True)
    g.set_outputs([chosen, total, steps, carry, ys])
    xv = np.array([1, 2, 3], F32)
    for pv in (True, False):
        feeds = {"x": xv, "p": np.bool_(pv)}
        for got in (evaluate(g, feeds), Session("cpu").compile(g).run(feeds)):
            np.testing.assert_array_equal(got[0], xv * 2 if pv else -xv)
            np.testing.assert_array_equal(got[1], xv * 16)
            assert got[2] == 4
            assert got[3] == 7  # 1 + 3 + 2 + 1
            np.testing.assert_array_equal(got[4], [6 * 1, 4 * 2, 1 * 3])  # ys[t] belongs to x[t]


def test_length_zero_scan_and_zero_iteration_while():
    g = Graph("empty")
    c, xs = g.input("c", (2,), "i32"), g.input("xs", (0, 2), "i32")
    carry, (ys, zs) = g.scan(lambda s, a, x: (s.add(a, x), [s.mul(a, x), s.cast(x, "f64")]), c, xs)
    stay = g.while_loop(lambda s, v: s.constant(False), lambda s, v: s.neg(v), c)
    g.set_outputs([carry, ys, zs, stay])
    out = Session("cpu").compile(g).run({"c": np.array([4, 5], np.int32), "xs": np.zeros((0, 2), np.int32)})
    np.testing.assert_array_equal(out[0], [4, 5])
    assert out[1].shape == (0, 2) and out[1].dtype == np.int32 and out[2].dtype == np.float64
    np.testing.assert_array_equal(out[3], [4, 5])


def test_max_iterations_stops_a_loop_that_would_not_end():
    g = Graph("forever")
    v = g.while_loop(lambda s, a: s.constant(True), lambda s, a: s.add(a, 1.0), g.input("a", ()),
                     max_iterations=7)
    g.set_outputs([v])
    assert evaluate(g, {"a": F32(0)})[0] == 7
    with pytest.raises(OpAttributeError, match="max_iterations must be >= 0, got -1"):
        g.while_loop(lambda s, a: s.constant(True), lambda s, a: a, g.input("b", ()), max_iterations=-1)


def test_rng_in_a_loop_draws_fresh_numbers_each_iteration():
    g = Graph("noise")
    carry, ys = g.scan(lambda s, c, x: (c, s.add(x, s.rng_uniform((4,)))), g.constant(F32(0)),
                       g.input("xs", (3, 4)))
    g.set_outputs([ys])
    zeros = {"xs": np.zeros((3, 4), F32)}
    ref = evaluate(g, zeros)[0]
    assert len({row.tobytes() for row in ref}) == 3  # one stream per iteration
    compiled = Session("cpu").compile(g)
    np.testing.assert_array_equal(compiled.run(zeros)[0], ref)  # backends fold the same way
    np.testing.assert_array_equal(compiled.run(zeros)[0], ref)  # and every run re-seeds
    compiled.set_rng(RngOptions(seed=1))
    assert not np.array_equal(compiled.run(zeros)[0], ref)
    np.testing.assert_array_equal(compiled.run(zeros)[0], evaluate(g, zeros, rng=RngOptions(seed=1))[0])


def test_subgraph_rng_keys_differ_from_the_outer_graph():
    g = Graph("keys")
    outer = g.rng_uniform((2,))
    inner = g.cond(g.constant(True), lambda s: s.rng_uniform((2,)), lambda s: s.rng_uniform((2,)), [])
    g.set_outputs([outer, inner])
    a, b = evaluate(g)
    assert not np.array_equal(a, b)


def test_nested_control_flow_and_bool_carries():
    g = Graph("nested")
    x = g.input("x", (4, 2))

    def body(s, acc, row, flag):
        picked = s.cond(flag, lambda b, r: b.exp(r), lambda b, r: b.neg(r), [row])
        inner = s.while_loop(lambda w, v, i: w.lt(i, 2), lambda w, v, i: (w.add(v, v), w.add(i, 1)),
                             [picked, s.constant(np.int32(0))])[0]
        return s.add(acc, inner), s.logical_not(flag)
    total, flips = g.scan(body, g.constant(np.zeros(2, F32)), [x, g.constant(np.array([1, 0, 1, 1], bool))])
    g.set_outputs([total, flips])
    xv = np.arange(8, dtype=F32).reshape(4, 2) / 8
    want = sum(4 * (np.exp(r) if f else -r) for r, f in zip(xv, [1, 0, 1, 1]))
    for got in (evaluate(g, {"x": xv}), Session("cpu").compile(g).run({"x": xv})):
        np.testing.assert_allclose(got[0], want, rtol=1e-6)
        np.testing.assert_array_equal(got[1], [False, True, False, False])


def test_graphs_with_subgraphs_round_trip_through_json():
    g = Graph("ser")
    x = g.input("x", (3,))
    y = g.cond(g.gt(g.input("t", ()), 0.0), lambda s, v: s.exp(v), lambda s, v: s.rng_normal(like=v), [x])
    c, ys = g.scan(lambda s, a, v: (s.add(a, v), s.sin(v)), g.constant(F32(0)), g.input("xs", (5,)))
    g.set_outputs([y, c, ys])
    back = Graph.from_json(g.to_json())
    assert back.fingerprint() == g.fingerprint()
    feeds = {"x": np.ones(3, F32), "t": F32(-1), "xs": np.arange(5, dtype=F32)}
    for a, b in zip(evaluate(g, feeds), evaluate(back, feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("precision", ["f16", "amp-bf16"])
def test_precision_policies_apply_inside_bodies(precision):
    g = Graph("amp")
    x = g.input("x", (3,))
    v, _ = g.while_loop(lambda s, a, i: s.lt(i, 3), lambda s, a, i: (s.mul(a, 1.5), s.add(i, 1)),
                        [x, g.constant(np.int32(0))])
    g.set_outputs([v])
    out = Session("cpu", precision=precision).compile(g).run({"x": np.ones(3, F32)})[0]
    assert out.dtype == F32
    np.testing.assert_allclose(out, 3.375, rtol=1e-2)


def test_control_build_errors_name_the_problem():
    g = Graph("bad")
    x, y = g.input("x", (3,)), g.input("y", (3,), "f16")
    p = g.input("p", (), "bool")
    with pytest.raises(DTypeError, match="if does not accept f32"):
        g.cond(g.input("fp", ()), lambda s, a: a, lambda s, a: a, [x])
    with pytest.raises(ShapeError, match=r"if cond must hold exactly one bool, got dims \[2\]"):
        g.cond(g.input("p2", (2,), "bool"), lambda s, a: a, lambda s, a: a, [x])
    with pytest.raises(ShapeError, match=r"if branches must return identical shapes: then_branch gives "
                                         r"\(\[3\] f32\), else_branch gives \(\[3\] f16\)"):
        g.cond(p, lambda s, a, b: a, lambda s, a, b: b, [x, y])
    with pytest.raises(ShapeError, match=r"then_branch 'pre' takes 1 input\(s\) \(\[3\] f32\) but is given 2"):
        g.cond(p, _graph("pre", {"a": ((3,), "f32")}, lambda s, a: a), lambda s, a, b: a, [x, y])
    with pytest.raises(GraphError, match="has params \\['w'\\]"):
        g.cond(p, _graph("w", {"a": ((3,), "f32")}, lambda s, a: s.add(a, s.param("w", (3,)))),
               lambda s, a: a, [x])
    with pytest.raises(GraphError, match="returns a value of graph 'bad'; subgraphs see only their own inputs"):
        g.cond(p, lambda s, a: x, lambda s, a: a, [x])
    with pytest.raises(GraphError, match=r"if@\d+.then 'bad/if@\d+.then': .*belongs to graph 'bad'"):
        g.cond(p, lambda s, a: s.add(a, x), lambda s, a: a, [x])
    with pytest.raises(ShapeError, match=r"while cond must return one single-element bool, got \(\[3\] bool\)"):
        g.while_loop(lambda s, a: s.gt(a, 0.0), lambda s, a: a, x)
    with pytest.raises(ShapeError, match=r"while body must return the carried shapes \(\[3\] f32\), got \(\[3\] f16\)"):
        g.while_loop(lambda s, a: s.constant(True), lambda s, a: s.cast(a, "f16"), x)
    with pytest.raises(ShapeError, match="while needs at least one carried value"):
        g.while_loop(lambda s: s.constant(True), lambda s: s.constant(1.0), [])
    with pytest.raises(ShapeError, match=r"scan needs at least one xs of rank >= 1"):
        g.scan(lambda s, c, v: (c, v), x, g.input("s", ()))
    with pytest.raises(ShapeError, match=r"one length along axis 0, got \(\[3\] f32, \[4, 2\] f32\)"):
        g.op("scan", x, g.input("m", (4, 2)), body=_graph("b", {"a": ((), "f32"), "b": ((2,), "f32")},
                                                          lambda s, a, b: a), num_carry=0)
    with pytest.raises(ShapeError, match=r"scan body must return the carry shapes \(\[3\] f32\) first"):
        g.scan(lambda s, c, v: (s.cast(c, "f16"), v), x, g.input("xs", (4, 2)))
    with pytest.raises(OpAttributeError, match=r"num_carry must be in \[0, 0\]"):
        g.op("scan", x, body=_graph("b2", {"a": ((3,), "f32")}, lambda s, a: a), num_carry=1)
    with pytest.raises(GraphError, match="must return a pair"):
        g.scan(lambda s, c, v: c, x, g.input("xs2", (4, 2)))
    with pytest.raises(GraphError, match="expected a Graph or a callable"):
        g.cond(p, 3, lambda s, a: a, [x])


# --- run_if / run_while --------------------------------------------------------------

def _loop_graphs():
    body = _graph("body", {"v": ((2,), "f32"), "i": ((), "i32")},
                  lambda s, v, i: (s.add(s.mul(v, 2.0), s.rng_uniform((2,))), s.add(i, 1)))
    cond = _graph("cond", {"i": ((), "i32")}, lambda s, i: s.lt(i, 5))
    return cond, body


def test_run_while_matches_the_while_op_rng_included():
    cond, body = _loop_graphs()
    init = {"v": np.ones(2, F32), "i": np.int32(0)}
    body_c = Session("cpu").compile(body)
    out = run_while(Session("cpu").compile(cond), body_c, init)
    assert out.names == ["v", "i"] and out["i"] == 5
    assert body_c.rng == RngOptions()  # restored after the loop
    g = Graph("op")
    v, i = g.input("v", (2,)), g.input("i", (), "i32")
    cond_op = _graph("cond_op", {"v": ((2,), "f32"), "i": ((), "i32")}, lambda s, v, i: s.lt(i, 5))
    g.set_outputs(list(g.while_loop(cond_op, body, [v, i])))
    np.testing.assert_array_equal(out[0], evaluate(g, init)[0])
    limited = run_while(Session("cpu").compile(cond), Session("cpu").compile(body), [np.ones(2, F32), 0],
                        max_iterations=2)
    assert limited["i"] == 2


def test_run_if_matches_the_if_op_and_checks_interfaces():
    then_g = _graph("then", {"a": ((2,), "f32")}, lambda s, a: s.add(a, s.rng_normal((2,))))
    else_g = _graph("else", {"a": ((2,), "f32")}, lambda s, a: s.neg(a))
    then_c, else_c = Session("cpu").compile(then_g), Session("cpu").compile(else_g)
    a = np.array([1, 2], F32)
    g = Graph("op")
    g.set_outputs(g.cond(g.input("p", (), "bool"), then_g, else_g, [g.input("a", (2,))]))
    for flag in (True, np.array([False]), 1, F32(0)):
        got = run_if(flag, then_c, else_c, {"a": a})
        np.testing.assert_array_equal(got[0], evaluate(g, {"p": bool(np.asarray(flag)), "a": a})[0])
    np.testing.assert_array_equal(run_if(False, then_c, else_c, [a])[0], -a)
    with pytest.raises(InputError, match=r"run_if cond must hold exactly one value, got an array of dims \[2\]"):
        run_if(np.array([True, False]), then_c, else_c, [a])
    with pytest.raises(InputError, match=r"takes 1 input\(s\) \['a'\], got 2 positional"):
        run_if(True, then_c, else_c, [a, a])
    other = Session("cpu").compile(_graph("o", {"b": ((2,), "f32")}, lambda s, b: b))
    with pytest.raises(GraphError, match=r"run_if: then takes \(a: \[2\] f32\) but else takes \(b: \[2\] f32\)"):
        run_if(True, then_c, other, [a])
    wide = Session("cpu").compile(_graph("w", {"a": ((2,), "f32")}, lambda s, v: s.cast(v, "f64")))
    with pytest.raises(GraphError, match=r"then returns \(\[2\] f32\) but else returns \(\[2\] f64\)"):
        run_if(True, then_c, wide, [a])


def test_run_while_interface_errors():
    cond, body = _loop_graphs()
    cond_c, body_c = Session("cpu").compile(cond), Session("cpu").compile(body)
    bad_body = Session("cpu").compile(_graph("bb", {"v": ((2,), "f32")}, lambda s, v: s.cast(v, "f16")))
    with pytest.raises(GraphError, match=r"body outputs \(\[2\] f16\) must match its inputs \(v: \[2\] f32\)"):
        run_while(cond_c, bad_body, [np.ones(2, F32)])
    stranger = Session("cpu").compile(_graph("c2", {"k": ((), "i32")}, lambda s, k: s.lt(k, 1)))
    with pytest.raises(GraphError, match=r"cond inputs \(k: \[\] i32\) are not body inputs"):
        run_while(stranger, body_c, [np.ones(2, F32), 0])
    two = Session("cpu").compile(_graph("c3", {"i": ((), "i32")}, lambda s, i: [s.lt(i, 1), s.gt(i, 1)]))
    with pytest.raises(GraphError, match="cond must return one single-element bool or number"):
        run_while(two, body_c, [np.ones(2, F32), 0])
    with pytest.raises(RlxError, match="max_iterations must be None or an integer >= 0, got -2"):
        run_while(cond_c, body_c, [np.ones(2, F32), 0], max_iterations=-2)
    numeric = Session("cpu").compile(_graph("c4", {"v": ((2,), "f32"), "i": ((), "i32")},
                                            lambda s, v, i: s.sub(s.cast(i, "f32"), 3.0)))
    assert run_while(numeric, body_c, [np.ones(2, F32), 0])["i"] == 3  # nonzero keeps going

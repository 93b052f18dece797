"""Control flow inside the compiled run: bodies bound to fixed arrays (two sets for loop
carries), results equal to the reference interpreter's, and no body run through the
reference kernels (a dict of inputs, a lock, fresh outputs per iteration)."""
import numpy as np
import pytest

from rlx_core import Graph, Session, evaluate
from rlx_core.reference import control as reference_control

F32 = np.float32


def _check(g: Graph, feeds: dict, runs: int = 3):
    """Compile and run ``g`` (three times: nothing is left over from the run before)
    against the reference; fails if a body runs the reference way meanwhile."""
    want = evaluate(g, feeds)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reference_control, "run_body", lambda *a: pytest.fail("a body ran the reference way"))
        compiled = Session("cpu").compile(g)
        for _ in range(runs):
            for got, exp in zip(compiled.run(feeds), want):
                np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)
    return compiled


def test_a_while_that_swaps_its_carries_and_keeps_one_unchanged():
    g = Graph("swap")
    a, b, k = g.input("a", (3,)), g.input("b", (3,)), g.input("k", (3,))
    n = g.constant(np.array(0, np.int32))
    outs = g.while_loop(lambda s, a, b, k, n: s.lt(n, s.constant(np.array(5, np.int32))),
                        lambda s, a, b, k, n: [b, s.add(a, k), k, s.add(n, s.constant(np.array(1, np.int32)))],
                        [a, b, k, n])
    g.set_outputs(list(outs))
    feeds = {"a": np.array([1, 2, 3], F32), "b": np.array([10, 20, 30], F32), "k": np.array([.5, .25, 1], F32)}
    _check(g, feeds)


def test_a_while_limited_by_max_iterations_and_a_computed_condition():
    g = Graph("limited")
    x = g.input("x", (2, 2))
    out = g.while_loop(lambda s, v: s.lt(s.sum(v), s.constant(np.array(1e6, F32))),
                       lambda s, v: s.add(s.matmul(v, v), v), x, max_iterations=3)
    g.set_outputs([out])
    _check(g, {"x": np.array([[1, 0.5], [0.25, 1]], F32)})
    _check(g, {"x": np.full((2, 2), 1e7, F32)})  # false at once: the initial values


@pytest.mark.parametrize("unrolled", [True, False], ids=["unrolled", "loop"])
def test_scan_over_1d_xs_with_an_if_inside_and_nested_loops(monkeypatch, unrolled):
    from rlx_cpu.kernels import control
    if not unrolled:  # scans longer than UNROLLED_STEPS run as a loop over two bindings
        monkeypatch.setattr(control, "UNROLLED_STEPS", 0)
    g = Graph("nested")
    p, xs, c = g.input("p", (4,), "bool"), g.input("xs", (4, 3)), g.input("c", (3,))

    def step(s, acc, pt, x):
        y = s.cond(pt, lambda b, v, a: b.exp(v), lambda b, v, a: b.add(b.neg(v), a), [x, acc])
        inner = s.scan(lambda t, q, r: (t.mul(q, r), t.add(q, r)), acc, s.reshape(x, (3, 1)))[0]
        return s.add(acc, y), [y, inner]
    final, ys = g.scan(step, c, [p, xs])
    g.set_outputs([final, *ys])
    feeds = {"p": np.array([True, False, True, False]), "xs": np.linspace(-1, 1, 12, dtype=F32).reshape(4, 3),
             "c": np.array([0.1, 0.2, 0.3], F32)}
    compiled = _check(g, feeds)
    (call,) = [c for _, calls in compiled.executable._runs._steps if calls for c in calls
               if getattr(c.fn, "__name__", "") == ("run_unrolled" if unrolled else "run_scan")]
    assert call.args == ()  # one bound function runs the whole loop


def test_random_numbers_follow_the_iteration():
    g = Graph("rng")
    xs = g.input("xs", (3, 2))
    g.set_outputs([g.scan(lambda s, x: ((), s.add(x, s.rng_uniform((2,)))), [], xs)[1]])
    compiled = _check(g, {"xs": np.zeros((3, 2), F32)})
    rows = compiled.run({"xs": np.zeros((3, 2), F32)})[0]
    assert len({tuple(r) for r in rows}) == 3  # a fresh draw per step


@pytest.mark.parametrize("unrolled", [True, False], ids=["unrolled", "loop"])
def test_a_scan_whose_output_is_its_new_carry(monkeypatch, unrolled):
    """An RNN's step returns its new state both as the carry and as y_t: the value is
    written once and copied for its other place (the unrolled run copies it straight into
    ys[t]); odd and even lengths end in either carried set."""
    from rlx_cpu.kernels import control
    if not unrolled:
        monkeypatch.setattr(control, "UNROLLED_STEPS", 0)
    for steps in (5, 6):
        g = Graph("rnn")
        h0, xs, w = g.input("h0", (1, 4)), g.input("xs", (steps, 1, 4)), g.input("w", (4, 4))

        def step(s, h, w_, x):
            h2 = s.tanh(s.add(s.matmul(h, w_), x))
            return [h2, w_], h2
        final, ys = g.scan(step, [h0, w], xs)
        g.set_outputs([final[0], ys])
        rng = np.random.default_rng(steps)
        _check(g, {"h0": rng.standard_normal((1, 4)).astype(F32), "xs": rng.standard_normal((steps, 1, 4)).astype(F32),
                   "w": rng.standard_normal((4, 4)).astype(F32) / 2})

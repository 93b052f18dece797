"""Constant folding, CSE, DCE, the pass selection option and the pipeline report."""
from __future__ import annotations

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.passes.cleanup import FOLD_GROWTH_BYTES, eliminate_common, eliminate_dead, fold_constants
from rlx_core.passes.pipeline import PASSES, PassOptionError, enabled_passes, optimize


def test_fold_constants_computes_constant_chains(same):
    g = Graph("fold")
    x = g.input("x", (2, 3), "f32")
    c = g.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    k = g.exp(g.transpose(c) * 0.5) + 1.0  # [2, 3], constants only
    g.set_outputs([x * k])
    new, notes = fold_constants(g)
    assert "transpose" in notes[0] and "exp" in notes[0]
    new, _ = eliminate_dead(new)
    assert [n.kind for n in new.nodes] == ["input", "constant", "mul"]
    same(g, new)


def test_params_are_never_folded(same):
    g = Graph("params")
    w = g.param("w", (3, 3), "f32")
    x = g.input("x", (2, 3), "f32")
    g.set_outputs([x @ g.transpose(w * 2.0)])
    new, notes = fold_constants(g)
    assert new is g and notes == []


def test_folding_is_bounded():
    """An expand of a scalar into more than FOLD_GROWTH_BYTES stays a runtime op; a large
    transpose of an equally large constant (no growth) is folded."""
    g = Graph("bounded")
    x = g.input("x", (1,), "f32")
    n = FOLD_GROWTH_BYTES // 4 + 1024
    big = g.add_node("expand", [g.constant(np.float32(1.0))], {"dims": (n,)})
    small = g.add_node("expand", [g.constant(np.float32(1.0))], {"dims": (16,)})
    cube = g.constant(np.ones((n // 64, 64), np.float32))
    g.set_outputs([big + x, small + x, g.transpose(cube)])
    new, _ = eliminate_dead(fold_constants(g)[0])
    assert [n.kind for n in new.nodes].count("expand") == 1
    assert "transpose" not in [n.kind for n in new.nodes]


def test_random_ops_are_neither_folded_nor_merged():
    g = Graph("rng")
    x = g.input("x", (4,), "f32")
    a, b = g.rng_uniform((4,)), g.rng_uniform((4,))
    g.set_outputs([x + a, x + b])
    assert fold_constants(g)[0] is g
    assert eliminate_common(g)[0] is g


def test_cse_merges_duplicates_and_equal_small_constants(same):
    g = Graph("cse")
    x = g.input("x", (3, 4), "f32")
    a = g.exp(x) * np.float32(2.0)
    b = g.exp(x) * np.float32(2.0)
    g.set_outputs([a + b, g.softmax(x, axis=1), g.softmax(x, axis=0)])
    new, notes = eliminate_common(g)
    new, _ = eliminate_dead(new)
    assert [n.kind for n in new.nodes].count("exp") == 1 and [n.kind for n in new.nodes].count("softmax") == 2
    assert len(notes) == 1
    same(g, new)


def test_dce_keeps_interface():
    g = Graph("dce")
    x = g.input("x", (2,), "f32")
    g.input("unused_input", (2,), "f32")
    g.param("unused_param", (2,), "f32")
    g.exp(x)  # dead
    g.set_outputs([x + 1.0], names=["y"])
    new, notes = eliminate_dead(g)
    assert new.input_names == ["x", "unused_input"] and new.param_names == ["unused_param"]
    assert "exp" not in [n.kind for n in new.nodes] and new.output_names == ["y"] and "1 unused" in notes[0]


@pytest.mark.parametrize("spec, want", [
    (None, set(PASSES)), ("all", set(PASSES)), ("none", set()), ("off", set()), ([], set(PASSES)),
    ("cse,dce", {"cse", "dce"}), (("fuse_gelu",), {"fuse_gelu"}),
    ("-fuse_attention,-fold_constants", set(PASSES) - {"fuse_attention", "fold_constants"})])
def test_enabled_passes(spec, want, monkeypatch):
    monkeypatch.delenv("RLX_PASSES", raising=False)
    assert enabled_passes(spec) == want


@pytest.mark.parametrize("spec", ["bogus", "cse,-dce", 3, ["cse", 1]])
def test_bad_pass_selection_is_named(spec):
    with pytest.raises(PassOptionError) as e:
        CompileOptions(passes=spec)
    assert isinstance(e.value, ValueError) and "CompileOptions(passes=...)" in str(e.value)


def test_rlx_passes_env(monkeypatch):
    monkeypatch.setenv("RLX_PASSES", "none")
    assert enabled_passes(None) == frozenset()
    monkeypatch.setenv("RLX_PASSES", "nonsense")
    with pytest.raises(PassOptionError, match="RLX_PASSES"):
        enabled_passes(None)


def _gelu_graph():
    g = Graph("explained")
    x = g.input("x", (4, 8), "f32")
    with g.origin("ONNX node 'gelu_mul' (Mul, opset 17)"):
        y = x * 0.5 * (g.erf(x / np.float32(np.sqrt(2.0))) + 1.0)
    g.set_outputs([y])
    return g


def test_explain_names_the_passes_and_nodes(monkeypatch):
    monkeypatch.delenv("RLX_PASSES", raising=False)
    g = _gelu_graph()
    compiled = Session("cpu").compile(g)
    text = compiled.explain()
    assert "fuse_gelu" in text and "gelu <-" in text and "ONNX node 'gelu_mul'" in text and "dce" in text
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    off = Session("cpu").compile(g, CompileOptions(passes="none"))
    assert "passes off" in off.explain()
    np.testing.assert_allclose(compiled.run({"x": x})[0], off.run({"x": x})[0], rtol=1e-5, atol=1e-6)


def test_env_turns_passes_off_in_compile(monkeypatch):
    monkeypatch.setenv("RLX_PASSES", "none")
    assert "passes off" in Session("cpu").compile(_gelu_graph()).explain()


def test_optimize_returns_the_graph_itself_when_nothing_changes():
    g = Graph("plain")
    x = g.input("x", (2, 2), "f32")
    g.set_outputs([g.relu(x)])
    new, report = optimize(g, "all")
    assert new is g and report.changes == () and "no pass changed anything" in report.text()

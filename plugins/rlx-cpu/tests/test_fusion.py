"""Fusion: what the scheduler groups, and that fused graphs compute what unfused ones do.

Every check compiles a graph twice -- fusion on (the default) and off -- and compares
both with the reference interpreter at the conformance tolerances.
"""
import numpy as np
import pytest

from rlx_core import CompileOptions, DType, Graph, Session, evaluate, models
from rlx_core.testing.compare import assert_close

from rlx_cpu.kernels import fused
from rlx_cpu.schedule import FUSED, MAX_GROUP_NODES

UNFUSED = CompileOptions(backend={"fusion": False})


def _compile(graph, params=None, options=None):
    compiled = Session("cpu").compile(graph, options)
    compiled.set_params(params or {})
    return compiled


def _check(graph, inputs, params=None, scale=1.0):
    """Fused and unfused runs both match the reference; returns the fused executable."""
    want = evaluate(graph, inputs, params or {})
    fused_run = _compile(graph, params)
    for compiled in (fused_run, _compile(graph, params, UNFUSED)):
        for _ in range(2):  # a second run sees the buffers the first one left
            got = compiled.run(inputs)
            for g, w, s in zip(got, want, graph.output_shapes):
                assert_close(g, w, s.dtype, scale)
    return fused_run.executable


def _kinds(exe):
    return [(s.kind, s.anchor.kind if s.anchor else None, s.norm.kind if s.norm else None,
             len(s.elementwise)) for s in exe.steps]


def _rand(rng, dims, dtype="f32"):
    dt = DType.of(dtype)
    if dt.is_int:
        return rng.integers(-50, 50, dims).astype(dt.np)
    if dt.is_bool:
        return rng.random(dims) < 0.5
    return rng.standard_normal(dims).astype(dt.np)


def test_elementwise_chain_is_one_kernel():
    g, _ = models.elementwise_chain(n=64)
    exe = _check(g, models.example_inputs(g))
    assert _kinds(exe) == [(FUSED, None, None, 16)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_mlp_layers_fuse_matmul_bias_relu(dtype):
    g, p = models.mlp(batch=4, sizes=(12, 8, 8, 3), dtype=dtype)
    exe = _check(g, models.example_inputs(g), p)
    assert _kinds(exe) == [(FUSED, "matmul", None, 2), (FUSED, "matmul", None, 2), (FUSED, "matmul", None, 1)]


def test_encoder_block_fuses_residual_norms_and_attention_views():
    g, p = models.transformer_block(batch=2, seq=6, d_model=16, heads=2, ffn=24)
    exe = _check(g, models.example_inputs(g), p, scale=2)
    kinds = _kinds(exe)
    assert (FUSED, "matmul", "layer_norm", 2) in kinds  # out-proj + bias + residual + LN1
    assert (FUSED, "matmul", None, 2) in kinds  # ffn-in + bias + gelu
    assert sum(k == (FUSED, "matmul", "layer_norm", 2) for k in kinds) == 2
    # q, k and v are views of the projection: no split, reshape or transpose step is left
    assert not any(s.kind in ("split", "transpose") for s in exe.steps)


def test_cnn_fuses_conv_bias_relu():
    g, p = models.small_cnn(batch=2, size=16, widths=(4, 8, 6), classes=5)
    exe = _check(g, models.example_inputs(g), p)
    assert [k for k in _kinds(exe) if k[1] == "conv"] == [(FUSED, "conv", None, 1)] * 3


def test_broadcasts_casts_compares_and_where_in_one_group():
    rng = np.random.default_rng(0)
    g = Graph("mixed")
    x = g.input("x", (2, 3, 4))
    bias = g.input("bias", (4,))
    count = g.input("count", (3, 1), "i32")
    scaled = (x + bias) * g.cast(count, "f32")
    y = g.where(scaled > 0.5, g.tanh(scaled), g.exp(-scaled) - 1.0)
    g.set_outputs([y, scaled])  # scaled is used inside the group and returned
    exe = _check(g, {"x": _rand(rng, (2, 3, 4)), "bias": _rand(rng, (4,)), "count": _rand(rng, (3, 1), "i32")})
    assert [k[0] for k in _kinds(exe)] == [FUSED]


@pytest.mark.parametrize("dtype", ["i8", "i32", "u8", "i64"])
def test_integer_groups_wrap_after_every_op(dtype):
    """Each intermediate wraps to the node's dtype before the next op reads it."""
    rng = np.random.default_rng(1)
    g = Graph("ints")
    a, b = g.input("a", (5, 7), dtype), g.input("b", (7,), dtype)
    g.set_outputs([g.div(a * b + a, b * 3 + 1) - g.max(a, b) * 2])  # wrapped values reach -128 in i8
    a_val = rng.integers(0, 100, (5, 7)).astype(DType.of(dtype).np)
    b_val = rng.integers(1, 40, (7,)).astype(DType.of(dtype).np)
    _check(g, {"a": a_val, "b": b_val})


def test_repeated_and_shared_operands():
    rng = np.random.default_rng(2)
    g = Graph("shared")
    x = g.input("x", (3, 5))
    s = x + x
    g.set_outputs([s * x, g.add(s, s)])
    _check(g, {"x": _rand(rng, (3, 5))})


@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norm_prologues_over_several_axes_and_strided_inputs(kind):
    rng = np.random.default_rng(3)
    g = Graph("norms")
    x = g.input("x", (4, 3, 6))
    r = g.input("r", (6, 3, 4))
    gamma = g.param("gamma", (3, 6))
    h = x * 0.5 + g.transpose(r, (2, 1, 0))  # a strided view read by the prologue
    y = getattr(g, kind)(h, gamma, axis=1, eps=1e-3)
    g.set_outputs([y, h])
    exe = _check(g, {"x": _rand(rng, (4, 3, 6)), "r": _rand(rng, (6, 3, 4))}, {"gamma": _rand(rng, (3, 6))})
    assert (FUSED, None, kind, 2) in _kinds(exe)


def test_matmul_activation_norm_computed_in_the_norms_output():
    """matmul -> tanh -> layer_norm with no bias: the kernel reads only the norm's own
    output (where the matmul wrote), and its parameter list is still valid Python."""
    rng = np.random.default_rng(7)
    g = Graph("head")
    x, w, gamma = g.input("x", (4, 6)), g.param("w", (6, 5)), g.param("gamma", (5,))
    g.set_outputs([g.layer_norm(g.tanh(x @ w), gamma, eps=1e-5)])
    exe = _check(g, {"x": _rand(rng, (4, 6))}, {"w": _rand(rng, (6, 5)), "gamma": _rand(rng, (5,))})
    assert _kinds(exe) == [(FUSED, "matmul", "layer_norm", 1)]


def test_attention_masks_and_grouped_heads():
    rng = np.random.default_rng(4)
    for kwargs in ({"mask": "causal"}, {"mask": "sliding", "window": 2}, {"softcap": 3.0}):
        g = Graph("attn")
        q, k, v = g.input("q", (2, 4, 5, 8)), g.input("k", (2, 2, 7, 8)), g.input("v", (2, 2, 7, 6))
        g.set_outputs([g.attention(q, k, v, **kwargs)])
        _check(g, {n: _rand(rng, s) for n, s in (("q", (2, 4, 5, 8)), ("k", (2, 2, 7, 8)), ("v", (2, 2, 7, 6)))})


def test_a_chain_longer_than_the_cap_is_several_kernels():
    """Past MAX_GROUP_NODES elementwise nodes a chain goes on in a new kernel; chunks
    computing the same ops are one generated kernel, compiled once."""
    g = Graph("long")
    y = g.input("x", (3, 5))
    for i in range(2 * MAX_GROUP_NODES + 10):
        y = g.add(y, 0.25) if i % 2 else g.mul(y, 0.999)
    g.set_outputs([y])
    exe = _check(g, {"x": _rand(np.random.default_rng(5), (3, 5))})
    assert _kinds(exe) == [(FUSED, None, None, MAX_GROUP_NODES)] * 2 + [(FUSED, None, None, 10)]
    fns = [call.fn for _, calls in exe._calls(exe._bind_views(exe._buffers)) for call in calls]
    assert fns[0] is fns[1] and fns[1] is not fns[2]


def test_a_norm_whose_gamma_depends_on_the_group_stays_apart():
    """Merging the norm into the group that computes its gamma would be a cycle."""
    rng = np.random.default_rng(6)
    g = Graph("gamma_cycle")
    x, r = g.input("x", (4, 6)), g.input("r", (4, 6))
    h = x + r
    gamma = g.exp(h.sum(axes=(0,))) * 0.5
    g.set_outputs([g.layer_norm(h, gamma, eps=1e-5)])
    exe = _check(g, {"x": _rand(rng, (4, 6)), "r": _rand(rng, (4, 6))})
    assert not any(s.norm for s in exe.steps)


def test_a_group_is_one_kernel_wherever_it_appears():
    """Two graphs with the same fused computation (other constants) share one kernel."""
    exes = []
    for c in (1.5, 2.5):
        g = Graph(f"twin{c}")
        x = g.input("x", (8,))
        g.set_outputs([g.tanh(x * c) + c])
        exes.append(Session("cpu").compile(g).executable)
    fns = [[call.fn for _, calls in exe._calls(exe._bind_views(exe._buffers)) for call in calls] for exe in exes]
    assert fns[0][-1] is fns[1][-1]


def test_measured_decision_can_split_a_group(monkeypatch):
    """A group timed as faster unfused runs as one ufunc call per node."""
    monkeypatch.setattr(fused, "MEASURE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(fused._decisions, "get", lambda key: "unfused")
    g = Graph("split")
    x = g.input("x", (16,))
    g.set_outputs([g.exp(x) * 2.0 + 1.0])
    exe = _check(g, {"x": np.linspace(-1, 1, 16, dtype=np.float32)})
    assert _kinds(exe) == [(FUSED, None, None, 1)] * 3


def test_tracing_runs_every_node_alone():
    g, _ = models.elementwise_chain(n=8, length=3)
    exe = Session("cpu").compile(g, CompileOptions(trace=True)).executable
    assert len(exe.steps) == 3

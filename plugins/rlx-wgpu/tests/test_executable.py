"""What the wgpu executable promises beyond matching the reference: fused elementwise
chains, one arena with shared bytes, cached pipelines, params uploaded once, one submit
per run, rng re-seeding without recompiling, and clear errors."""
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, RngOptions, Session, evaluate
from rlx_core.errors import DeviceError, RlxError
from rlx_wgpu.gpu import open_gpu

pytest.importorskip("wgpu")


def _compile(g, **backend):
    return Session("gpu").compile(g, CompileOptions(backend=backend))


def _chain(size=1000):
    g = Graph("chain")
    x = g.input("x", (size,))
    y = g.input("y", (size,))
    g.set_outputs([g.exp(g.tanh(x * 2.0 + y) - 1.0)])
    return g


def test_elementwise_chain_is_one_kernel():
    exe = _compile(_chain()).executable
    assert len(exe.steps) == 1
    assert len(exe.steps[0].dispatches) == 1 and len(exe.steps[0].nodes) == 5
    assert len(exe.steps[0].dispatches[0].slots) == 3  # x, y and the output: the constants are inlined
    x, y = np.linspace(-1, 1, 1000, dtype=np.float32), np.ones(1000, np.float32)
    np.testing.assert_allclose(_compile(_chain()).run({"x": x, "y": y})[0], np.exp(np.tanh(2 * x + 1) - 1), rtol=1e-5)


def test_values_used_twice_or_returned_are_not_fused_away():
    g = Graph("shared")
    x = g.input("x", (8,))
    t = g.tanh(x)
    g.set_outputs([t * t, g.exp(t)])
    exe = _compile(g).executable
    assert len(exe.steps) == 3  # tanh, then its two consumers
    xv = np.arange(8, dtype=np.float32) / 4
    out = exe.run({"x": xv})
    np.testing.assert_allclose(out[0], np.tanh(xv) ** 2, rtol=1e-5)
    np.testing.assert_allclose(out[1], np.exp(np.tanh(xv)), rtol=1e-5)


def test_arena_shares_bytes_between_values_that_do_not_overlap():
    g = Graph("mlp")
    x = g.input("x", (64, 64))
    h = x
    for i in range(6):
        h = g.softmax(g.matmul(h, g.param(f"w{i}", (64, 64))))
    g.set_outputs([h])
    exe = _compile(g).executable
    alignment = open_gpu("gpu").alignment
    value_bytes = 64 * 64 * 4
    assert exe.arena_bytes < (1 + 6 + 12) * value_bytes  # 6 params + input + (at most) a few live values
    assert all(offset % alignment == 0 for offset in exe._offsets.values())


def test_one_submit_per_run_and_cached_pipelines():
    gpu = open_gpu("gpu")
    c = _compile(_chain(64))
    before = gpu.pipeline_count
    again = _compile(_chain(64))
    assert gpu.pipeline_count == before  # same sources: the pipelines are reused
    feeds = {"x": np.ones(64, np.float32), "y": np.zeros(64, np.float32)}
    c.run(feeds)
    again.run(feeds)
    assert c.executable.last_submits == 1


def test_pipeline_cache_is_bounded_and_evicted_pipelines_stay_with_their_graphs():
    """600 graphs differing only in a literal (baked into their WGSL) keep at most
    ``pipeline_cache_size`` pipelines cached; a graph whose pipeline was evicted still runs."""
    from rlx_wgpu.gpu import PIPELINE_CACHE_SIZE
    gpu = open_gpu("gpu")
    assert gpu.pipeline_cache_size == PIPELINE_CACHE_SIZE <= 256

    def literal_graph(c):
        g = Graph(f"literal{c}")
        g.set_outputs([g.input("x", (4,)) + float(c)])
        return _compile(g)

    first = literal_graph(0.5)
    for c in range(600):
        literal_graph(c + 1000)
        assert gpu.pipeline_count <= gpu.pipeline_cache_size
    assert gpu.pipeline_count == gpu.pipeline_cache_size
    np.testing.assert_array_equal(first.run({"x": np.ones(4, np.float32)})[0], np.full(4, 1.5, np.float32))


def test_control_flow_submits_once_per_condition_read():
    g = Graph("loop")
    x = g.input("x", (4,))
    out = g.while_loop(lambda s, v, i: s.lt(i, 3), lambda s, v, i: (s.mul(v, 2.0), s.add(i, 1)),
                       [x, g.constant(np.int32(0))])
    g.set_outputs([out[0]])
    c = _compile(g)
    np.testing.assert_array_equal(c.run({"x": np.ones(4, np.float32)})[0], np.full(4, 8, np.float32))
    assert c.executable.last_submits == 4 + 1  # four condition reads, then the outputs


def test_params_are_uploaded_once_and_kept():
    g = Graph("affine")
    x = g.input("x", (2, 3))
    w = g.param("w", (3, 2))
    g.set_outputs([g.matmul(x, w)])
    c = _compile(g)
    w1 = np.arange(6, dtype=np.float32).reshape(3, 2)
    c.set_param("w", w1)
    xv = np.ones((2, 3), np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(c.run({"x": xv})[0], xv @ w1)
    c.set_param("w", -w1)
    np.testing.assert_array_equal(c.run({"x": xv})[0], -(xv @ w1))


@pytest.mark.parametrize("mode", ["philox", "ort", "zero"])
def test_rng_modes_and_reseeding_match_the_reference(mode):
    g = Graph("noise")
    x = g.input("x", (3, 4))
    g.set_outputs([g.add(x, g.rng_uniform((3, 4), low=-1.0, high=2.0)), g.rng_normal((5,), dtype="f32")])
    c = _compile(g)
    xv = np.zeros((3, 4), np.float32)
    for seed in (1, 2):
        rng = RngOptions(seed=seed, mode=mode)
        c.set_rng(rng)
        got, want = c.run({"x": xv}), evaluate(g, {"x": xv}, rng=rng)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_unknown_backend_option_and_bad_tile_are_errors():
    with pytest.raises(DeviceError, match="unknown wgpu backend option"):
        _compile(_chain(8), tile=1)
    g = Graph("mm")
    g.set_outputs([g.matmul(g.input("a", (4, 4)), g.input("b", (4, 4)))])
    with pytest.raises(RlxError, match="matmul_tile must look like"):
        _compile(g, matmul_tile="big")


def test_values_larger_than_a_binding_are_a_device_error():
    g = Graph("huge")
    x = g.input("x", (33_554_433,))  # one element more than 128 MiB of f32
    g.set_outputs([g.neg(x)])
    with pytest.raises(DeviceError, match="max-storage-buffer-binding-size"):
        Session("webgpu").compile(g)


def test_tracing_times_every_step(caplog):
    g = _chain(16)
    c = Session("gpu").compile(g, CompileOptions(trace=True))
    with caplog.at_level("INFO", logger="rlx.trace"):
        c.run({"x": np.zeros(16, np.float32), "y": np.zeros(16, np.float32)})
    assert "fused[" in caplog.text


def test_attention_too_wide_for_workgroup_memory_is_rejected_with_the_reason():
    from rlx_core.errors import UnsupportedOpError
    g = Graph("wide")
    q, k = g.input("q", (1, 1, 1, 4)), g.input("k", (1, 1, 2, 4))
    g.set_outputs([g.attention(q, k, g.input("v", (1, 1, 2, 4000)))])
    with pytest.raises(UnsupportedOpError, match="workgroup memory"):
        Session("webgpu").compile(g)

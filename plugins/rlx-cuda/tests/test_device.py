"""CUDA-only contracts (skipped without CuPy and a GPU): no allocation in steady state,
CUDA graph capture, DLPack in and out (CuPy and torch), Philox bits equal to the CPU's."""
import numpy as np
import pytest
from rlx_core import CompileOptions, DType, Graph, RngOptions, Session
from rlx_core.rng import philox_normal, philox_uniform, combine_seed

from rlx_cuda.probe import probe

_avail = probe()
pytestmark = pytest.mark.skipif(not _avail.ok, reason=f"no CUDA device: {_avail.reason}")


def _block(dtype="f32"):
    g = Graph("block")
    x = g.input("x", (4, 64, 128), dtype)
    w = g.param("w", (128, 128), dtype)
    q = g.transpose(g.reshape(g.matmul(x, w), (4, 64, 4, 32)), (0, 2, 1, 3))
    a = g.attention(q, q, q, "causal")
    h = g.reshape(g.transpose(a, (0, 2, 1, 3)), (4, 64, 128))
    y = g.layer_norm(g.gelu(h) + x, np.ones(128), np.zeros(128))
    g.set_outputs([y])
    return g


def _compiled(g, **backend):
    return Session("cuda", options=CompileOptions(backend=backend)).compile(g)


def _data(dtype="f32"):
    rng, np_dtype = np.random.default_rng(0), DType.of(dtype).np
    return (rng.standard_normal((4, 64, 128)).astype(np_dtype),
            (rng.standard_normal((128, 128)) / 12).astype(np_dtype))


def test_steady_state_runs_allocate_no_device_memory():
    import cupy as cp
    c = _compiled(_block(), outputs="cupy")
    x, w = _data()
    c.set_param("w", w)
    xd = cp.asarray(x)
    for _ in range(3):
        c.run({"x": xd})
    pool = cp.get_default_memory_pool()
    calls = []
    cp.cuda.set_allocator(lambda n: (calls.append(n), pool.malloc(n))[1])
    try:
        exe = c.executable
        for _ in range(5):
            exe.run_device([xd])
        cp.cuda.get_current_stream().synchronize()
    finally:
        cp.cuda.set_allocator(pool.malloc)
    assert calls == [], f"steady-state runs allocated {calls}"


def test_the_whole_run_is_one_captured_cuda_graph():
    c = _compiled(_block())
    x, w = _data()
    c.set_param("w", w)
    first = c.run({"x": x})[0]
    assert "graph_capture" in c.capabilities
    for _ in range(3):
        again = c.run({"x": x})[0]
    assert c.executable._graph is not None, c.executable.capture_error
    np.testing.assert_array_equal(first, again)
    from rlx_core import evaluate
    np.testing.assert_allclose(again, evaluate(c.graph, {"x": x}, {"w": w})[0], rtol=2e-3, atol=2e-3)


def test_dlpack_inputs_and_outputs_with_cupy_and_torch():
    import cupy as cp
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x, w = _data()
    expected = None
    for mode, to_device in (("cupy", cp.asarray), ("torch", lambda a: torch.from_numpy(a).cuda())):
        c = _compiled(_block(), outputs=mode)
        c.set_param("w", to_device(w))
        out = c.run({"x": to_device(x)})[0]
        host = cp.asnumpy(out) if mode == "cupy" else out.cpu().numpy()
        expected = host if expected is None else expected
        np.testing.assert_array_equal(host, expected)
    tb = torch.from_numpy(x).cuda().to(torch.bfloat16)
    c = _compiled(_block("bf16"), outputs="torch")
    c.set_param("w", torch.from_numpy(w).cuda().to(torch.bfloat16))
    out = c.run({"x": tb})[0]
    assert out.dtype == torch.bfloat16 and out.is_cuda


def test_host_inputs_large_and_small_reach_the_device_in_run_and_submit():
    """Large host inputs are copied from their own memory in run(), small ones through
    the pinned mirror in one copy; submit() sends all through the mirror. Every input,
    wherever it sits in the input block, must arrive, run after run, with new values."""
    import cupy as cp
    from rlx_core import evaluate
    g = Graph("mixed")
    shapes = {"a": (3,), "big": (64, 1024), "b": (5, 7), "big2": (300, 129)}
    ins = {name: g.input(name, dims) for name, dims in shapes.items()}
    g.set_outputs([ins["a"].sum() + ins["big"].sum() * 2.0, ins["b"].sum() - ins["big2"].sum(),
                   ins["big2"] * 3.0])
    c = _compiled(g)
    rng = np.random.default_rng(3)
    for round_ in range(4):
        feeds = {name: rng.standard_normal(dims).astype(np.float32) for name, dims in shapes.items()}
        want = evaluate(g, feeds)
        got = c.run(feeds) if round_ % 2 == 0 else c.submit(feeds).wait()
        for w, r in zip(want, got):
            np.testing.assert_allclose(r, w, rtol=1e-4, atol=1e-3)
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16"])
def test_philox_uniform_bits_equal_the_cpu(dtype):
    g = Graph("rng")
    g.set_outputs([g.rng_uniform((1001,), low=-1.0, high=3.0, dtype=dtype, key=7),
                   g.rng_normal((999,), mean=1.0, scale=2.0, key=8)])
    c = Session("cuda", options=CompileOptions(rng=RngOptions(seed=1234))).compile(g)
    u, z = c.run({})
    want = philox_uniform(combine_seed(1234, 7), 1001, -1.0, 3.0).astype(u.dtype)
    np.testing.assert_array_equal(u, want)
    np.testing.assert_allclose(z, philox_normal(combine_seed(1234, 8), 999, 1.0, 2.0), rtol=1e-5, atol=1e-5)
    c.set_rng(RngOptions(seed=99))
    u2 = c.run({})[0]
    np.testing.assert_array_equal(u2, philox_uniform(combine_seed(99, 7), 1001, -1.0, 3.0).astype(u.dtype))


def test_kernels_compile_once_per_process():
    from rlx_cuda.runtime import Runtime
    rt = Runtime.get(0)
    c = _compiled(_block())
    before = len(rt._kernels)
    _compiled(_block())
    assert len(rt._kernels) == before and c is not None


def test_a_plan_larger_than_the_gpu_is_refused_at_compile_time():
    """The plan is checked against the GPU's memory (totalGlobalMem), not the host's."""
    from rlx_core.errors import ResourceError
    gpu_bytes = _avail.detail["memory_bytes"]
    g = Graph("too_big")
    x = g.input("x", (gpu_bytes // 4 + 1,), "f32")  # one f32 more than the GPU holds
    g.set_outputs([g.add(x, 1.0)])
    with pytest.raises(ResourceError, match="bytes"):
        Session("cuda").compile(g)

"""Kernel paths the conformance cases are too small to reach: every matmul tile (vec4 and
guarded edges), FFTs in global memory and direct DFTs, long rows, grids folded into two
dimensions. Checked against numpy (and scipy where numpy has no answer)."""
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.errors import RlxError
from rlx_wgpu.codegen.linalg import TILES
from rlx_wgpu.codegen.wgsl import f32, grid

pytest.importorskip("wgpu")
RNG = np.random.default_rng(7)


def _run(device, build, *arrays, **backend):
    g = Graph("k")
    ins = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    out = build(g, *ins)
    g.set_outputs(list(out) if isinstance(out, (list, tuple)) else [out])
    c = Session(device).compile(g, CompileOptions(backend=backend))
    return c.run({f"x{i}": a for i, a in enumerate(arrays)})


@pytest.mark.parametrize("tile", sorted(TILES))
@pytest.mark.parametrize("m,k,n", [(256, 128, 256), (132, 44, 68), (130, 37, 70)])
def test_matmul_tiles(tile, m, k, n):
    """A tile multiple (unguarded vec4), edges with whole vec4 rows (guarded vec4), odd
    rows (element by element)."""
    a, b = RNG.standard_normal((m, k), np.float32), RNG.standard_normal((k, n), np.float32)
    got = _run("gpu", lambda g, x, y: g.matmul(x, y), a, b, matmul_tile=tile)[0]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_batched_matmul_on_the_vec4_path():
    a, b = RNG.standard_normal((3, 128, 64), np.float32), RNG.standard_normal((64, 128), np.float32)
    got = _run("gpu", lambda g, x, y: g.matmul(x, y), a, b, matmul_tile="64x64x8/4x4")[0]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", ["128x128x16/8x8/db/w8", "64x64x8/4x4"])
def test_wrapping_int_matmul_on_the_guarded_vec4_path(tile):
    a = RNG.integers(-2**20, 2**20, (2, 132, 40), dtype=np.int32)
    b = RNG.integers(-2**20, 2**20, (40, 72), dtype=np.int32)
    got = _run("gpu", lambda g, x, y: g.matmul(x, y), a, b, matmul_tile=tile)[0]
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32))


def test_a_forced_tile_beyond_the_workgroup_memory_limit_is_an_error():
    a = RNG.standard_normal((64, 64), np.float32)
    with pytest.raises(RlxError, match="needs 32768 bytes of workgroup memory; this device allows 16384"):
        _run("webgpu", lambda g, x, y: g.matmul(x, y), a, a, matmul_tile="128x128x16/8x8/db")


def test_batched_matmul_with_broadcast_and_wrapping_ints():
    a = RNG.integers(-2**20, 2**20, (3, 1, 70, 40), dtype=np.int32)
    b = RNG.integers(-2**20, 2**20, (4, 40, 66), dtype=np.int32)
    got = _run("gpu", lambda g, x, y: g.matmul(x, y), a, b)[0]
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32))


@pytest.mark.parametrize("device,n", [("webgpu", 4096), ("gpu", 1000), ("gpu", 64)])
def test_fft_paths(device, n):
    """4096 on the WebGPU profile does not fit workgroup memory (global radix-2), 1000 is
    not a power of two (direct DFT), 64 runs in workgroup memory."""
    x = (RNG.standard_normal((3, n)) + 1j * RNG.standard_normal((3, n))).astype(np.complex64)
    got = _run(device, lambda g, v: [g.fft(v), g.ifft(v, norm="ortho")], x)
    np.testing.assert_allclose(got[0], np.fft.fft(x), rtol=1e-4, atol=2e-3 * np.sqrt(n))
    np.testing.assert_allclose(got[1], np.fft.ifft(x, norm="ortho"), rtol=1e-4, atol=1e-4)


def test_irfft_of_rfft_round_trips_a_long_signal():
    x = RNG.standard_normal((2, 8192)).astype(np.float32)
    got = _run("webgpu", lambda g, v: g.irfft(g.rfft(v), n=8192), x)[0]
    np.testing.assert_allclose(got, x, atol=2e-5)


def test_long_rows_and_many_rows():
    x = RNG.standard_normal((3, 100_003)).astype(np.float32)
    got = _run("gpu", lambda g, v: [g.sum(v, 1), g.reduce_max(v, 1), g.argmin(v, 1), g.softmax(v, 1)], x)
    np.testing.assert_allclose(got[0], x.sum(1, dtype=np.float64), rtol=1e-4, atol=1e-2)
    np.testing.assert_array_equal(got[1], x.max(1))
    np.testing.assert_array_equal(got[2], x.argmin(1))
    np.testing.assert_allclose(got[3], np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(
        1, keepdims=True), rtol=1e-4, atol=1e-9)


def test_grid_folds_into_two_dimensions():
    assert grid(70_000, 1) == (65535, 2, 1)
    n = 65_536 * 256 + 17  # more workgroups than one grid dimension holds
    x = np.arange(n, dtype=np.float32)
    got = _run("gpu", lambda g, v: v * 2.0, x)[0]
    np.testing.assert_array_equal(got[[0, 1, n // 2, n - 1]], 2 * x[[0, 1, n // 2, n - 1]])


def test_unsorted_topk_and_long_cumsum():
    x = RNG.integers(-50, 50, (4, 300)).astype(np.float32)
    values, indices = _run("gpu", lambda g, v: g.topk(v, 20, sorted=False), x)
    order = np.sort(np.argsort(-x, axis=1, kind="stable")[:, :20], axis=1)
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))
    c = _run("gpu", lambda g, v: g.cumsum(v, 1, reverse=True), x)[0]
    np.testing.assert_array_equal(c, np.cumsum(x[:, ::-1], 1)[:, ::-1])


def test_dense_solve_larger_system():
    a = RNG.standard_normal((2, 48, 48)).astype(np.float32) + 48 * np.eye(48, dtype=np.float32)
    b = RNG.standard_normal((2, 48, 5)).astype(np.float32)
    got = _run("gpu", lambda g, u, v: g.dense_solve(u, v), a, b)[0]
    np.testing.assert_allclose(got, np.linalg.solve(a.astype(np.float64), b), rtol=1e-4, atol=1e-5)


def test_attention_with_many_keys_matches_torch():
    torch = pytest.importorskip("torch")
    q = RNG.standard_normal((1, 4, 9, 16)).astype(np.float32)
    k = RNG.standard_normal((1, 2, 300, 16)).astype(np.float32)
    v = RNG.standard_normal((1, 2, 300, 8)).astype(np.float32)
    got = _run("gpu", lambda g, a, b, c: g.attention(a, b, c, "causal"), q, k, v)[0]
    mask = torch.ones(9, 300, dtype=torch.bool).tril(300 - 9)
    want = torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k).repeat_interleave(2, 1), torch.from_numpy(v).repeat_interleave(2, 1),
        attn_mask=mask)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5)


def test_conv_matches_scipy():
    signal = pytest.importorskip("scipy.signal")
    x = RNG.standard_normal((1, 1, 40, 33)).astype(np.float32)
    w = RNG.standard_normal((1, 1, 5, 4)).astype(np.float32)
    got = _run("gpu", lambda g, a, b: g.conv(a, b), x, w)[0]
    np.testing.assert_allclose(got[0, 0], signal.correlate2d(x[0, 0], w[0, 0], mode="valid"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, 1e-45, 3.4028235e38, np.inf, -np.inf, 0.1, 1 / 3])
def test_f32_literals_are_exact(value):
    text = f32(value)
    if text.startswith("bitcast"):
        bits = int(text.split("(")[1].rstrip("u)"), 16)
        assert np.array(bits, np.uint32).view(np.float32) == np.float32(value)
    else:
        assert np.float32(float(text.rstrip("f"))) == np.float32(value)

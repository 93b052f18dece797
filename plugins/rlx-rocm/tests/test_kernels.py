"""Kernel paths the conformance cases are too small to reach: every GEMM tile (edge and
full tiles, the vload4 path), batched and broadcast products, long reductions."""
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_rocm.codegen.linalg import TILES


def _run(g, feeds, **backend):
    return Session("rocm").compile(g, CompileOptions(backend=backend)).run(feeds)


@pytest.mark.parametrize("tile", [str(t) for t in TILES])
def test_gemm_tiles_on_edges_and_full_tiles(tile):
    rng = np.random.default_rng(0)
    # (130, 70, 129): rows not multiples of 4, element loads; (260, 68, 264): full tiles read as
    # float4 (vload4, or aligned float4 for /v) in the first blocks, a partial K tile and edges after
    for m, k, n in ((130, 70, 129), (260, 68, 264)):
        g = Graph("mm")
        a, b = g.input("a", (m, k)), g.input("b", (k, n))
        g.set_outputs([g.matmul(a, b)])
        x, y = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        np.testing.assert_allclose(_run(g, {"a": x, "b": y}, gemm_tile=tile)[0], x @ y, rtol=1e-4, atol=1e-4)


def test_batched_broadcast_matmul_f16_and_i32():
    rng = np.random.default_rng(1)
    for dt in ("f16", "i32", "f64"):
        g = Graph("bmm")
        a, b = g.input("a", (3, 1, 40, 33), dt), g.input("b", (2, 33, 36), dt)
        g.set_outputs([g.matmul(a, b)])
        x = rng.integers(-3, 4, (3, 1, 40, 33)).astype(a.dtype.np)
        y = rng.integers(-3, 4, (2, 33, 36)).astype(b.dtype.np)
        got = _run(g, {"a": x, "b": y}, gemm_tile="32x32x8/4x4")[0]
        np.testing.assert_array_equal(got, (x.astype(np.float64) @ y.astype(np.float64)).astype(x.dtype))


def test_bad_gemm_tile_option_is_refused():
    from rlx_core.errors import RlxError
    g = Graph("mm")
    a = g.input("a", (4, 4))
    g.set_outputs([g.matmul(a, a)])
    with pytest.raises(RlxError, match="gemm_tile"):
        Session("rocm").compile(g, CompileOptions(backend={"gemm_tile": "big"}))
    with pytest.raises(RlxError, match="unknown rocm backend option"):
        Session("rocm").compile(g, CompileOptions(backend={"tile": 1}))


def _cases(kind):
    from rlx_core.testing import all_cases
    return [c for c in all_cases([kind])]


@pytest.mark.parametrize("case", _cases("conv"), ids=lambda c: c.id)
def test_conv_im2col_route_matches_the_reference(case):
    from rlx_core.reference import evaluate
    from rlx_core.testing import assert_close, build_case, make_data
    g = build_case(case)
    compiled = Session("rocm").compile(g, CompileOptions(backend={"conv": "im2col"}))
    inputs, params = make_data(case)
    for name, value in params.items():
        compiled.set_param(name, value)
    for got, want, shape in zip(compiled.run(inputs), evaluate(g, inputs, params), g.output_shapes):
        assert_close(got, want, shape.dtype, case.tol)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_long_arg_reductions_keep_the_first_index_and_the_first_nan(kind):
    rng = np.random.default_rng(3)
    x = rng.integers(-5, 5, (2, 5000)).astype(np.float32)
    x[1, [4000, 1700]] = np.nan
    g = Graph("arg")
    v = g.input("x", (2, 5000))
    g.set_outputs([getattr(g, kind)(v)])
    got = _run(g, {"x": x})[0]
    np.testing.assert_array_equal(got, getattr(np, kind)(x, axis=-1))
    xi = rng.integers(-3, 3, (3, 4096)).astype(np.int32)
    g = Graph("arg-i")
    v = g.input("x", (3, 4096), "i32")
    g.set_outputs([getattr(g, kind)(v)])
    np.testing.assert_array_equal(_run(g, {"x": xi})[0], getattr(np, kind)(xi, axis=-1))


@pytest.mark.parametrize("tile", ["64x64x16/4x4/v", "128x64x16/8x4/v"])
def test_v_tiles_in_batched_products_and_the_conv_epilogue(tile):
    """/v tiles with a batch (offsets per batch) and as the im2col GEMM with its bias."""
    rng = np.random.default_rng(4)
    g = Graph("bmm")
    a, b = g.input("a", (3, 68, 36)), g.input("b", (3, 36, 132))
    g.set_outputs([g.matmul(a, b)])
    x, y = rng.standard_normal((3, 68, 36), np.float32), rng.standard_normal((3, 36, 132), np.float32)
    np.testing.assert_allclose(_run(g, {"a": x, "b": y}, gemm_tile=tile)[0], x @ y, rtol=1e-4, atol=1e-4)
    from rlx_core.reference import evaluate
    g = Graph("conv")
    xin, w, bias = g.input("x", (2, 8, 12, 12)), g.input("w", (64, 8, 3, 3)), g.input("bias", (64,))
    g.set_outputs([g.conv(xin, w, bias, pads=1)])
    feeds = {"x": rng.standard_normal((2, 8, 12, 12), np.float32), "w": rng.standard_normal((64, 8, 3, 3), np.float32),
             "bias": rng.standard_normal(64).astype(np.float32)}
    got = _run(g, feeds, gemm_tile=tile, conv="im2col")[0]
    np.testing.assert_allclose(got, evaluate(g, feeds, {})[0], rtol=1e-4, atol=1e-4)

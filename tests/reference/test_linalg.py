"""The linalg reference kernels against numpy's, torch's and scipy's, and the shape
rules against numpy's; bad inputs raise RlxErrors that say what was expected."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlx_core import DType, Graph, Shape
from rlx_core.errors import DTypeError, ShapeError
from rlx_core.testing import assert_close
from rlx_core.testing.cases_linalg import well_conditioned
from rlx_core.testing.external import run_reference

torch = pytest.importorskip("torch")
scipy_linalg = pytest.importorskip("scipy.linalg")

KINDS = ("matmul", "dense_solve")
rng = np.random.default_rng(7)


def _wrap(exact: np.ndarray, dt: DType) -> np.ndarray:
    """Python-int results reduced modulo 2**bits into ``dt``'s range (two's complement)."""
    info = np.iinfo(dt.np)
    span = int(info.max) - int(info.min) + 1
    return np.vectorize(lambda v: (v - int(info.min)) % span + int(info.min), otypes=[object])(exact).astype(dt.np)


# --- matmul ---------------------------------------------------------------------------

@pytest.mark.parametrize("da,db", [((3, 4), (4, 5)), ((4,), (4, 2)), ((2, 4), (4,)), ((6,), (6,)),
                                   ((2, 1, 3, 4), (5, 4, 2)), ((3,), (2, 3, 4)), ((2, 0), (0, 3))])
@pytest.mark.parametrize("dt", ["f32", "f64", "c64"])
def test_matmul_matches_torch(da, db, dt):
    a = rng.standard_normal(da).astype(DType.of(dt).np)
    b = rng.standard_normal(db).astype(DType.of(dt).np)
    expected = torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert_close(run_reference(lambda g, x, y: g.matmul(x, y), a, b), expected, dt)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_matmul_low_floats_round_once(dt):
    a = rng.standard_normal((4, 16)).astype(DType.of(dt).np)
    b = rng.standard_normal((16, 3)).astype(DType.of(dt).np)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = run_reference(lambda g, x, y: g.matmul(x, y), a, b)
    assert got.dtype == DType.of(dt).np
    assert_close(got, exact.astype(DType.of(dt).np), dt)


@pytest.mark.parametrize("dt", ["i8", "u8", "i16", "i32", "u32", "i64"])
def test_integer_matmul_is_exact_modulo_the_dtype(dt):
    info = np.iinfo(DType.of(dt).np)
    a = rng.integers(info.min, info.max, (3, 9), endpoint=True).astype(DType.of(dt).np)
    b = rng.integers(info.min, info.max, (2, 9, 4), endpoint=True).astype(DType.of(dt).np)
    exact = np.matmul(a.astype(object), b.astype(object))  # Python ints: no overflow at all
    got = run_reference(lambda g, x, y: g.matmul(x, y), a, b)
    np.testing.assert_array_equal(got, _wrap(exact, DType.of(dt)))


def test_matmul_seed_form_and_operator():
    g = Graph("seed")
    x = g.input("x", Shape((1, 4), "f32"))
    w = g.param("w", Shape((4, 2), "f32"))
    y = g.matmul(x, w, Shape((1, 2), "f32"))
    assert y.shape == Shape((1, 2), "f32") and (x @ w).shape == y.shape
    with pytest.raises(ShapeError, match=r"given shape .* but the matmul rule gives"):
        g.matmul(x, w, Shape((2, 1), "f32"))


def test_matmul_promotes_mixed_dtypes():
    g = Graph()
    a, b = g.input("a", (2, 3), "i8"), g.input("b", (3,), "f16")
    assert g.matmul(a, b).dtype is DType.F16
    assert g.matmul(g.input("c", (2, 3), "u8"), g.input("d", (3, 2), "i8")).dtype is DType.I16
    assert (g.matmul([[1.0, 2.0]], g.input("e", (2, 2), "f64"))).dtype is DType.F64


_dim = st.integers(0, 3)


@settings(max_examples=150, deadline=None)
@given(st.lists(_dim, min_size=1, max_size=4), st.lists(_dim, min_size=1, max_size=4))
def test_matmul_shape_rule_agrees_with_numpy(da, db):
    try:
        want = np.matmul(np.zeros(da), np.zeros(db)).shape
    except ValueError:
        want = None
    g = Graph()
    a, b = g.input("a", da), g.input("b", db)
    if want is None:
        with pytest.raises(ShapeError):
            g.matmul(a, b)
    else:
        assert g.matmul(a, b).dims == want


@pytest.mark.parametrize("da,db,match", [
    ((), (3,), "rank >= 1"), ((2, 3), (4, 2), "contraction sizes differ.*K=3.*K=4"),
    ((2, 2, 3), (3, 3, 1), "cannot broadcast matmul batch dims")])
def test_matmul_shape_errors(da, db, match):
    g = Graph()
    with pytest.raises(ShapeError, match=match):
        g.matmul(g.input("a", da), g.input("b", db))


def test_matmul_rejects_bool():
    g = Graph()
    with pytest.raises(DTypeError, match="matmul does not accept bool"):
        g.matmul(g.input("a", (2, 2), "bool"), g.input("b", (2, 2), "bool"))


# --- dense_solve ----------------------------------------------------------------------

@pytest.mark.parametrize("da,db", [((3, 3), (3,)), ((4, 4), (4, 2)), ((2, 4, 4), (2, 4)), ((2, 3, 3), (3,)),
                                   ((2, 1, 3, 3), (5, 3, 2)), ((3, 3), (2, 3, 1)), ((2, 3, 3), (3, 3)),
                                   ((0, 0), (0,))])
@pytest.mark.parametrize("dt", ["f32", "f64", "c64", "c128"])
def test_dense_solve_matches_torch(da, db, dt):
    """torch.linalg.solve has the same vector-or-matrix rule and batch broadcasting."""
    d = DType.of(dt)
    a = well_conditioned(rng, da, d).astype(d.np)
    b = (rng.standard_normal(db) + (1j * rng.standard_normal(db) if d.is_complex else 0)).astype(d.np)
    expected = torch.linalg.solve(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert_close(run_reference(lambda g, x, y: g.dense_solve(x, y), a, b), expected, dt, scale=2)


def test_dense_solve_matches_scipy_lu_per_system():
    a = rng.standard_normal((3, 5, 5))
    b = rng.standard_normal((3, 5, 2))
    expected = np.stack([scipy_linalg.lu_solve(scipy_linalg.lu_factor(m), r) for m, r in zip(a, b)])
    assert_close(run_reference(lambda g, x, y: g.dense_solve(x, y), a, b), expected, "f64", scale=10)


def test_dense_solve_returns_nan_for_singular_systems_only():
    a = np.stack([np.eye(3), np.zeros((3, 3)), 2 * np.eye(3)])
    b = np.ones((3, 3))
    got = run_reference(lambda g, x, y: g.dense_solve(x, y), a, b)
    np.testing.assert_array_equal(got[0], np.ones(3))
    assert np.isnan(got[1]).all()
    np.testing.assert_array_equal(got[2], np.full(3, 0.5))


@pytest.mark.parametrize("da,db,match", [
    ((3, 4), (3,), r"square matrices A \[..., N, N\], got A \[3, 4\]"),
    ((3,), (3,), "square matrices"),
    ((3, 3), (4,), "N=3 but b \\[4\\] \\(a vector right-hand side\\) has 4 rows"),
    ((3, 3), (4, 2), "has 4 rows"),
    ((2, 3, 3), (4, 3, 1), "cannot broadcast dense_solve batch dims"),
    ((3, 3), (), r"b \[..., N\] or \[..., N, K\]")])
def test_dense_solve_shape_errors(da, db, match):
    g = Graph()
    with pytest.raises(ShapeError, match=match):
        g.dense_solve(g.input("a", da), g.input("b", db))


def test_dense_solve_rejects_integers():
    g = Graph()
    with pytest.raises(DTypeError, match="dense_solve does not accept i32"):
        g.dense_solve(g.input("a", (2, 2), "i32"), g.input("b", (2,), "i32"))

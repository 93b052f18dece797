"""The float32 exp/tanh/erf/sigmoid of numba kernels against float64 truth."""
import math

import numpy as np
import pytest
from numba import njit

from rlx_cpu.jit import fastmath

_erf64 = np.vectorize(math.erf)
TRUTH = {"exp": np.exp, "tanh": np.tanh, "erf": _erf64, "sigmoid": lambda x: 1 / (1 + np.exp(-x))}
SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30, 1e-8, 88.7, 88.73, -87.3, -87.4, -100.0,
                     3.92, 3.95, -4.5, 9.0, -9.5, 1.0, -1.0, 20.0], np.float32)


def _vectorized(name):
    fn = getattr(fastmath, f"fast_{name}")

    @njit
    def apply(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
    return apply


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_float32_accuracy_and_special_values(name):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000) * 4, np.linspace(-100, 100, 20001)]).astype(np.float32)
    x = np.concatenate([x, SPECIALS])
    got = np.empty_like(x)
    _vectorized(name)(x, got)
    with np.errstate(all="ignore"):
        want = TRUTH[name](x.astype(np.float64))
    finite = np.isfinite(want) & (np.abs(want) < np.finfo(np.float32).max) & (np.abs(want) > 1.2e-38)
    assert np.max(np.abs(got[finite] / want[finite] - 1)) < 5e-7
    tiny = np.abs(want) <= 1.2e-38
    assert np.all(np.abs(got[tiny]) <= 1.2e-38)  # flushed to zero below float32's normals
    assert np.array_equal(np.isnan(got), np.isnan(want))
    big = ~np.isnan(want) & ~finite & ~tiny  # beyond float32: exactly inf (exp overflow)
    assert np.all(np.isinf(got[big]) & (np.sign(got[big]) == np.sign(want[big])))


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_float64_uses_libm(name):
    x = np.linspace(-30, 30, 1001)
    got = np.empty_like(x)
    _vectorized(name)(x, got)
    np.testing.assert_allclose(got, TRUTH[name](x), rtol=1e-14, atol=1e-300)

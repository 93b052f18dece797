"""GELU, LayerNorm/RMSNorm and BatchNorm patterns on builder graphs: the written-out
forms become the fused ops and compute the same (reference interpreter); forms that
differ in any constant, axis or position are left alone."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rlx_core import Graph
from rlx_core.passes.pipeline import optimize

F = np.float32


def run(g, same, passes="all"):
    new, report = optimize(g, passes)
    same(g, new)
    return [n.kind for n in new.nodes], report


# --- GELU -----------------------------------------------------------------------------------
GELUS = {
    "erf_div": lambda g, x: x * 0.5 * (g.erf(x / F(math.sqrt(2))) + 1.0),
    "erf_mul": lambda g, x: 0.5 * (x * (1.0 + g.erf(F(1 / math.sqrt(2)) * x))),
    "erf_half_last": lambda g, x: (x * (g.erf(x * F(1 / math.sqrt(2))) + 1.0)) / F(2.0),
    "tanh_pow": lambda g, x: 0.5 * x * (1.0 + g.tanh(F(math.sqrt(2 / math.pi)) * (x + 0.044715 * x ** F(3.0)))),
    "tanh_products": lambda g, x: x * (g.tanh((x + x * x * x * 0.044715) * F(math.sqrt(2 / math.pi))) + 1.0) * 0.5,
}


@pytest.mark.parametrize("form", list(GELUS))
def test_gelu_forms(form, same):
    g = Graph(form)
    x = g.input("x", (3, 16), "f32")
    g.set_outputs([GELUS[form](g, g.add(x, 0.25))])  # x itself an add: matched as a whole
    got, report = run(g, same)
    assert ("gelu" if form.startswith("erf") else "gelu_tanh") in got
    assert not {"erf", "tanh", "pow"} & set(got)


@pytest.mark.parametrize("bad", [
    lambda g, x: x * 0.5 * (g.erf(x / F(1.41)) + 1.0),                      # not sqrt(2)
    lambda g, x: x * 0.5 * (g.erf(x / F(math.sqrt(2))) + 2.0),              # not 1 +
    lambda g, x: x * 0.25 * (g.erf(x / F(math.sqrt(2))) + 1.0),             # not 0.5
    lambda g, x: 0.5 * x * (1.0 + g.tanh(F(0.79788) * (x + 0.044715 * x ** F(3.0)))),
    lambda g, x: 0.5 * x * (1.0 + g.tanh(F(math.sqrt(2 / math.pi)) * (x + 0.0447 * x ** F(3.0)))),
    lambda g, x: 0.5 * x * (1.0 + g.tanh(F(math.sqrt(2 / math.pi)) * (x + 0.044715 * x ** F(2.0)))),
])
def test_gelu_lookalikes_stay(bad, same):
    g = Graph("lookalike")
    x = g.input("x", (3, 16), "f32")
    g.set_outputs([bad(g, x)])
    got, _ = run(g, same)
    assert "gelu" not in got and "gelu_tanh" not in got


def test_gelu_with_broadcast_is_left_alone(same):
    g = Graph("broadcast")
    x = g.input("x", (3, 16), "f32")
    half = g.constant(np.full((2, 1, 1), 0.5, np.float32))  # one-element? no: broadcasts x up
    g.set_outputs([half * x * (g.erf(x / F(math.sqrt(2))) + 1.0)])
    got, _ = run(g, same)
    assert "gelu" not in got


# --- LayerNorm / RMSNorm ----------------------------------------------------------------------
def _layer_norm(g, x, axes, gamma, beta, eps=1e-5, square="pow", inv="div"):
    d = x - g.mean(x, axes, keepdims=True)
    var = g.mean(d ** F(2.0) if square == "pow" else d * d, axes, keepdims=True)
    if inv == "div":
        y = d / g.sqrt(var + F(eps))
    elif inv == "rsqrt":
        y = d * g.rsqrt(var + F(eps))
    else:
        y = d * g.reciprocal(g.sqrt(F(eps) + var))
    if gamma is not None:
        y = y * gamma
    return y + beta if beta is not None else y


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("inv", ["div", "rsqrt", "reciprocal"])
@pytest.mark.parametrize("affine", ["both", "gamma", "beta", "none"])
def test_layer_norm_forms(square, inv, affine, same):
    g = Graph("ln")
    x = g.input("x", (2, 5, 16), "f32")
    gamma = g.param("gamma", (16,), "f32") if affine in ("both", "gamma") else None
    beta = g.param("beta", (1, 16), "f32") if affine in ("both", "beta") else None
    g.set_outputs([_layer_norm(g, x, [-1], gamma, beta, 1e-5, square, inv)])
    got, report = run(g, same)
    assert got.count("layer_norm") == 1 and "reduce_mean" not in got and "sqrt" not in got
    assert "eps=1e-05" in report.text()


def test_layer_norm_over_two_trailing_axes(same):
    g = Graph("ln2")
    x = g.input("x", (2, 4, 6), "f32")
    gamma = g.param("gamma", (4, 6), "f32")
    g.set_outputs([_layer_norm(g, x, [1, 2], gamma * F(3.0), g.param("beta", (6,), "f32"), 1e-3)])
    got, _ = run(g, same)
    ln = [n for n in optimize(g)[0].nodes if n.kind == "layer_norm"]
    assert len(ln) == 1 and ln[0].attrs["axis"] == 1 and abs(ln[0].attrs["eps"] - 1e-3) < 1e-9


@pytest.mark.parametrize("bad", ["eps_outside", "wrong_axes", "other_mean_axes", "gamma_varies_by_row",
                                 "square_of_other"])
def test_layer_norm_lookalikes_stay(bad, same):
    g = Graph(bad)
    x = g.input("x", (2, 5, 16), "f32")
    axes = [1] if bad == "wrong_axes" else [-1]
    d = x - g.mean(x, axes, keepdims=True)
    var = g.mean(d * d if bad != "square_of_other" else x * x, [1, 2] if bad == "other_mean_axes" else axes,
                 keepdims=True)
    den = g.sqrt(var) + F(1e-5) if bad == "eps_outside" else g.sqrt(var + F(1e-5))
    gamma = g.param("gamma", (5, 1) if bad == "gamma_varies_by_row" else (16,), "f32")
    g.set_outputs([d / den * gamma])
    got, _ = run(g, same)
    if bad == "gamma_varies_by_row":  # normalized without it; the row-wise gamma stays a mul
        assert got[-2:] == ["layer_norm", "mul"]
    else:
        assert "layer_norm" not in got


RMS = {
    "rsqrt": lambda g, x, w: x * g.rsqrt(g.mean(x ** F(2.0), [-1], keepdims=True) + F(1e-6)) * w,
    "div": lambda g, x, w: w * (x / g.sqrt(g.mean(x * x, [-1], keepdims=True) + F(1e-6))),
    "one_over": lambda g, x, w: x * (F(1.0) / g.sqrt(g.mean(x ** F(2.0), [-1], keepdims=True) + F(1e-6))) * w,
    "no_gamma": lambda g, x, w: x * g.rsqrt(g.mean(x * x, [-1], keepdims=True) + F(1e-6)),
}


@pytest.mark.parametrize("form", list(RMS))
def test_rms_norm_forms(form, same):
    g = Graph(form)
    x = g.input("x", (3, 7, 32), "f32")
    w = g.param("w", (32,), "f32")
    g.set_outputs([RMS[form](g, x, w)])
    got, report = run(g, same)
    assert got.count("rms_norm") == 1 and "reduce_mean" not in got
    assert "eps=1e-06" in report.text()


def test_rms_norm_without_keepdims_or_with_eps_outside_stays(same):
    g = Graph("rms_bad")
    x = g.input("x", (4, 4), "f32")
    ms = g.mean(x * x, [-1], keepdims=False)  # [4] broadcasts along the other axis
    g.set_outputs([x * g.rsqrt(ms + F(1e-6)), x / (g.sqrt(g.mean(x * x, [-1], keepdims=True)) + F(1e-6))])
    got, _ = run(g, same)
    assert "rms_norm" not in got


# --- BatchNorm into conv / matmul --------------------------------------------------------------
def _bn(g, y, c, rng, axis_dims):
    mean, var = rng.standard_normal(c), rng.uniform(0.5, 2.0, c)
    scale, bias = rng.standard_normal(c), rng.standard_normal(c)
    shaped = [g.constant(v.astype(np.float32).reshape(axis_dims)) for v in (mean, var, scale, bias)]
    mean, var, scale, bias = shaped
    return (y - mean) / g.sqrt(var + F(1e-5)) * scale + bias


@pytest.mark.parametrize("conv_bias", [True, False])
def test_batch_norm_folds_into_conv(conv_bias, same):
    rng = np.random.default_rng(1)
    g = Graph("conv_bn")
    x = g.input("x", (2, 3, 8, 8), "f32")
    w = g.constant(rng.standard_normal((6, 3, 3, 3)).astype(np.float32))
    b = g.constant(rng.standard_normal(6).astype(np.float32)) if conv_bias else None
    y = g.conv(x, w, b, pads=1)
    g.set_outputs([g.relu(_bn(g, y, 6, rng, (6, 1, 1)))])
    got, report = run(g, same)
    assert got == ["input", "constant", "constant", "conv", "relu"]
    assert "fold_batch_norm" in report.text()


def test_batch_norm_folds_into_matmul(same):
    rng = np.random.default_rng(2)
    g = Graph("mm_bn")
    x = g.input("x", (4, 5, 8), "f32")
    y = x @ g.constant(rng.standard_normal((8, 6)).astype(np.float32))
    g.set_outputs([_bn(g, y, 6, rng, (6,))])
    got, _ = run(g, same)
    assert got == ["input", "constant", "matmul", "constant", "add"]


def test_batch_norm_with_params_or_shared_conv_stays(same):
    rng = np.random.default_rng(3)
    g = Graph("params")
    x = g.input("x", (1, 3, 4, 4), "f32")
    y = g.conv(x, g.param("w", (4, 3, 1, 1), "f32"))
    z = g.conv(x, g.constant(rng.standard_normal((4, 3, 1, 1)).astype(np.float32)))
    g.set_outputs([_bn(g, y, 4, rng, (4, 1, 1)), _bn(g, z, 4, rng, (4, 1, 1)), z])  # z also an output
    got, _ = run(g, same)
    assert got.count("sub") == 2


def test_affine_along_another_axis_stays(same):
    rng = np.random.default_rng(4)
    g = Graph("rows")
    x = g.input("x", (1, 3, 4, 4), "f32")
    y = g.conv(x, g.constant(rng.standard_normal((4, 3, 1, 1)).astype(np.float32)))
    g.set_outputs([y * g.constant(rng.standard_normal((4, 1)).astype(np.float32))])  # varies along H
    got, _ = run(g, same)
    assert "mul" in got

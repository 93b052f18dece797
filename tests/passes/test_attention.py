"""Attention written out (matmul -> scale -> mask -> softmax -> matmul) becomes the
attention op, with the scale and mask it means; lookalikes are left alone."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rlx_core import Graph
from rlx_core.ir.ops.nn import attention_visibility
from rlx_core.passes.pipeline import optimize

F = np.float32
B, H, S, D = 2, 3, 5, 4


def run(g, same):
    new, _ = optimize(g)
    same(g, new)
    return new, [n.kind for n in new.nodes]


def _qkv(g, rank=4):
    dims = (B, H, S, D) if rank == 4 else (B * H, S, D)
    return (g.input(n, dims, "f32") for n in "qkv")


def _attention_node(new):
    found = [n for n in new.nodes if n.kind == "attention"]
    assert len(found) == 1, new.pretty()
    return found[0]


@pytest.mark.parametrize("style", ["div", "mul", "prescaled", "unscaled"])
def test_scale_forms(style, same):
    g = Graph(style)
    q, k, v = _qkv(g)
    kt = g.transpose(k, (0, 1, 3, 2))
    if style == "prescaled":  # torch's encoder layer: q and k each times D ** -0.25
        s = (q * F(D ** -0.25)) @ (kt * F(D ** -0.25))
    else:
        s = q @ kt
        s = s / F(math.sqrt(D)) if style == "div" else s * F(0.3) if style == "mul" else s
    g.set_outputs([g.softmax(s, axis=-1) @ v])
    new, got = run(g, same)
    assert "softmax" not in got and got.count("transpose") == 0  # k's transposes cancel
    want = {"div": 1 / math.sqrt(D), "mul": 0.3, "prescaled": 1 / math.sqrt(D), "unscaled": 1.0}[style]
    node = _attention_node(new)
    assert node.attrs["mask"] == "none" and node.attrs["scale"] == pytest.approx(want, rel=1e-6)


def _scores(g, q, k, scale=math.sqrt(D)):  # [B, H, S, S]
    return (q @ g.transpose(k, (0, 1, 3, 2))) / F(scale)


@pytest.mark.parametrize("polarity", ["hide_true", "keep_true"])
def test_constant_causal_where_mask(polarity, same):
    g = Graph("causal")
    q, k, v = _qkv(g)
    visible = attention_visibility("causal", S, S, None)
    s = _scores(g, q, k)
    inf = g.constant(F(-np.inf))
    z = g.where(g.constant(~visible), inf, s) if polarity == "hide_true" else g.where(g.constant(visible), s, inf)
    g.set_outputs([g.softmax(z, axis=3) @ v])
    new, _ = run(g, same)
    assert _attention_node(new).attrs["mask"] == "causal"


def test_constant_custom_and_additive_masks(same):
    g = Graph("masks")
    q, k, v = _qkv(g)
    rng = np.random.default_rng(0)
    keep = rng.random((S, S)) < 0.6
    keep[:, 0] = True  # every query sees a key
    bias = np.where(attention_visibility("causal", S, S, None), 0, -np.inf).astype(np.float32)
    soft = rng.standard_normal((1, H, S, S)).astype(np.float32)
    q2, q3 = (g.input(n, (B, H, S, D), "f32") for n in ("q2", "q3"))  # scores not shared (CSE)
    outs = [g.softmax(g.where(g.constant(keep), _scores(g, q, k, 1.0), F(-np.inf)), axis=-1) @ v,
            g.softmax(_scores(g, q2, k, 2.0) + g.constant(bias), axis=-1) @ v,
            g.softmax(g.constant(soft) + _scores(g, q3, k, 3.0), axis=-1) @ v]
    g.set_outputs(outs)
    new, got = run(g, same)
    assert got.count("attention") == 3 and "softmax" not in got
    modes = [n.attrs["mask"] for n in new.nodes if n.kind == "attention"]
    assert sorted(modes) == ["bias", "causal", "custom"]
    assert sorted(n.attrs["scale"] for n in new.nodes if n.kind == "attention") == [1 / 3, 0.5, 1.0]


def test_runtime_masks(same):
    g = Graph("runtime")
    q, k, v = _qkv(g)
    pad = g.input("pad", (B, 1, 1, S), "bool")   # True = padding (hidden)
    add = g.input("add", (B, 1, S, S), "f32")
    outs = [g.softmax(g.where(pad, F(-np.inf), _scores(g, q, k)), axis=-1) @ v,
            g.softmax(_scores(g, k, q) + add, axis=-1) @ v]
    g.set_outputs(outs)
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((B, H, S, D)).astype(F) for n in "qkv"}
    padding = np.zeros((B, 1, 1, S), bool)
    padding[0, ..., 3:] = True
    feeds.update(pad=padding, add=rng.standard_normal((B, 1, S, S)).astype(F))
    new, _ = optimize(g)
    same(g, new, feeds)
    modes = sorted(n.attrs["mask"] for n in new.nodes if n.kind == "attention")
    assert modes == ["bias", "custom"] and "logical_not" in [n.kind for n in new.nodes]


def test_rank3_heads_folded_into_batch(same):
    g = Graph("rank3")
    q, k, v = _qkv(g, rank=3)
    s = (q @ g.transpose(k, (0, 2, 1))) * F(0.5)
    g.set_outputs([g.softmax(s, axis=2) @ v])
    new, got = run(g, same)
    assert _attention_node(new).attrs["scale"] == 0.5 and "softmax" not in got


def test_split_qkv_and_head_transposes(same):
    """GPT-2's layout: one projection split into q, k, v, heads split off by reshape and
    transpose, k transposed to [B, H, D, S]."""
    g = Graph("split")
    x = g.input("x", (B, S, 3 * H * D), "f32")
    q, k, v = g.split(x, [H * D] * 3, axis=2)
    q, v = (g.transpose(g.reshape(t, (B, S, H, D)), (0, 2, 1, 3)) for t in (q, v))
    kt = g.transpose(g.reshape(k, (B, S, H, D)), (0, 2, 3, 1))
    probs = g.softmax(g.where(g.constant(~attention_visibility("causal", S, S, None)), F(-np.inf),
                              (q @ kt) / F(math.sqrt(D))), axis=-1)
    g.set_outputs([g.reshape(g.transpose(probs @ v, (0, 2, 1, 3)), (B, S, H * D))])
    new, got = run(g, same)
    assert _attention_node(new).attrs["mask"] == "causal" and got.count("transpose") == 4


@pytest.mark.parametrize("bad", ["softmax_axis", "finite_fill", "hidden_row", "mask_before_scale",
                                 "probs_used_twice", "gqa_broadcast"])
def test_lookalikes_stay(bad, same):
    g = Graph(bad)
    q, k, v = _qkv(g)
    if bad == "gqa_broadcast":
        k = g.input("k1", (B, 1, S, D), "f32")
    s = _scores(g, q, k)
    if bad == "finite_fill":
        s = g.where(g.constant(~attention_visibility("causal", S, S, None)), F(-1e9), s)
    elif bad == "hidden_row":
        hide = np.zeros((S, S), bool)
        hide[2] = True
        s = g.where(g.constant(hide), F(-np.inf), s)
    elif bad == "mask_before_scale":
        s = (q @ g.transpose(k, (0, 1, 3, 2)) + g.constant(np.zeros((S, S), F))) * F(0.5)
    p = g.softmax(s, axis=2 if bad == "softmax_axis" else 3)
    outs = [p @ v] + ([p] if bad == "probs_used_twice" else [])
    g.set_outputs(outs)
    new, got = run(g, same)
    assert "attention" not in got

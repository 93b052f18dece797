"""The nn reference kernels against torch, onnxruntime and ONNX's own node tests, and
the shape rules' errors."""
import math

import numpy as np
import pytest

from rlx_core import DType, Graph
from rlx_core.errors import DTypeError, OpAttributeError, ShapeError
from rlx_core.ir.ops.nn import rope_tables
from rlx_core.testing import assert_close
from rlx_core.testing.external import onnx_node_cases, run_onnx_node, run_reference

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytest.importorskip("onnxruntime")

KINDS = ("layer_norm", "rms_norm", "group_norm", "attention", "rope")
rng = np.random.default_rng(11)


def _normal(*dims, dtype=np.float32):
    return rng.standard_normal(dims).astype(dtype)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# --- normalizations --------------------------------------------------------------------

@pytest.mark.parametrize("dims,axis", [((2, 3, 8), -1), ((2, 3, 8), 1), ((4, 5), 0), ((2, 3, 4, 5), -3)])
@pytest.mark.parametrize("with_beta", [True, False])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_layer_and_rms_norm_match_torch(dims, axis, with_beta, dt):
    x = _normal(*dims, dtype=dt)
    normalized = dims[axis % len(dims):]
    gamma, beta = _normal(*normalized, dtype=dt), _normal(*normalized, dtype=dt)
    beta_in = beta if with_beta else None
    shift = _t(beta) if with_beta else 0
    got = run_reference(lambda g, x, ga, *b: [g.layer_norm(x, ga, *b, axis=axis, eps=1e-3),
                                               g.rms_norm(x, ga, *b, axis=axis, eps=1e-3)],
                        x, gamma, *([beta_in] if with_beta else []))
    ln = F.layer_norm(_t(x), normalized, _t(gamma), _t(beta) if with_beta else None, eps=1e-3)
    rms = F.rms_norm(_t(x), normalized, _t(gamma), eps=1e-3) + shift
    assert_close(got[0], ln.numpy(), DType.of(dt), scale=2)
    assert_close(got[1], rms.numpy(), DType.of(dt), scale=2)


@pytest.mark.parametrize("dims,groups", [((2, 6, 4, 4), 3), ((3, 4), 2), ((2, 6, 5), 6), ((2, 4, 3, 2, 2), 1)])
def test_group_norm_matches_torch(dims, groups):
    x, gamma, beta = _normal(*dims), _normal(dims[1]), _normal(dims[1])
    got = run_reference(lambda g, x, ga, be: g.group_norm(x, ga, be, num_groups=groups, eps=1e-4), x, gamma, beta)
    assert_close(got, F.group_norm(_t(x), groups, _t(gamma), _t(beta), eps=1e-4).numpy(), "f32", scale=2)


_NORM_OPS = {"LayerNormalization": "layer_norm", "RMSNormalization": "rms_norm", "GroupNormalization": "group_norm"}


@pytest.mark.parametrize("op_type", sorted(_NORM_OPS))
def test_norms_match_onnx_node_tests(op_type):
    cases = list(onnx_node_cases(op_type))
    assert cases, f"no ONNX node tests found for {op_type}"
    kind = _NORM_OPS[op_type]
    for case in cases:
        attrs = {"eps": case.attrs.get("epsilon", 1e-5)}
        if kind == "group_norm":
            attrs["num_groups"] = case.attrs["num_groups"]
        else:
            attrs["axis"] = case.attrs.get("axis", -1)
        got = run_reference(lambda g, x, *rest: getattr(g, kind)(x, *rest, **attrs), *case.inputs)
        assert_close(got, case.outputs[0], "f32", scale=2, what=case.name)


def test_norm_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"layer_norm gamma must have dims \[3, 4\], got \[4\]"):
        g.layer_norm(x, g.input("gamma", (4,)), axis=1)
    with pytest.raises(ShapeError, match=r"rms_norm beta must have dims \[4\], got \[3\]"):
        g.rms_norm(x, np.ones(4), g.input("b", (3,)))
    with pytest.raises(DTypeError, match="layer_norm gamma must have the input's dtype f32, got f16"):
        g.layer_norm(x, g.input("g16", (4,), "f16"))
    with pytest.raises(ShapeError, match="layer_norm axis 3 is out of range for rank 3"):
        g.layer_norm(x, np.ones(4), axis=3)
    with pytest.raises(OpAttributeError, match="eps must be a finite number >= 0"):
        g.rms_norm(x, np.ones(4), eps=-1.0)
    with pytest.raises(OpAttributeError, match="num_groups must be >= 1 and divide the 3 channels, got 2"):
        g.group_norm(x, np.ones(3), np.zeros(3), num_groups=2)
    with pytest.raises(ShapeError, match=r"group_norm needs x \[N, C, ...\] of rank >= 2"):
        g.group_norm(g.input("v", (3,)), np.ones(3), np.zeros(3), num_groups=1)
    with pytest.raises(DTypeError, match="layer_norm does not accept i32"):
        g.layer_norm(g.input("i", (2, 3), "i32"), np.ones(3))


# --- attention -------------------------------------------------------------------------

def _qkv(b=2, hq=4, hkv=2, sq=5, sk=7, d=8, dv=6, dtype=np.float32):
    return _normal(b, hq, sq, d, dtype=dtype), _normal(b, hkv, sk, d, dtype=dtype), _normal(b, hkv, sk, dv, dtype=dtype)


def _sdpa(q, k, v, attn_mask=None, scale=None):
    """torch's SDPA with the KV heads repeated for grouped queries (repeat_interleave)."""
    group = q.shape[1] // k.shape[1]
    k, v = (_t(a).repeat_interleave(group, dim=1) for a in (k, v))
    return F.scaled_dot_product_attention(_t(q), k, v, attn_mask=attn_mask, scale=scale).numpy()


@pytest.mark.parametrize("dims", [dict(), dict(hq=6, hkv=1), dict(hq=3, hkv=3, sq=7), dict(sq=1, sk=9)])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_attention_none_and_causal_match_torch(dims, scale):
    q, k, v = _qkv(**dims)
    sq, sk = q.shape[2], k.shape[2]
    got = run_reference(lambda g, q, k, v: [g.attention(q, k, v, scale=scale),
                                            g.attention(q, k, v, "causal", scale=scale)], q, k, v)
    assert_close(got[0], _sdpa(q, k, v, scale=scale), "f32")
    # torch's lower-right causal bias aligns queries to the end of the keys, as ours does.
    from torch.nn.attention.bias import causal_lower_right
    bias = causal_lower_right(sq, sk)._materialize()
    assert_close(got[1], _sdpa(q, k, v, attn_mask=bias, scale=scale), "f32")


def test_attention_grouped_heads_match_torch_enable_gqa():
    q, k, v = _qkv(hq=8, hkv=2)
    expected = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), enable_gqa=True).numpy()
    assert_close(run_reference(lambda g, q, k, v: g.attention(q, k, v), q, k, v), expected, "f32")


@pytest.mark.parametrize("mask_dims", [(5, 7), (2, 1, 5, 7), (1, 4, 1, 7), (2, 4, 5, 7)])
def test_attention_custom_and_bias_masks_match_torch(mask_dims):
    q, k, v = _qkv()
    keep = rng.random(mask_dims) < 0.7
    keep[..., 0] = True  # torch gives NaN for rows without keys (ours give zeros, tested below)
    bias = _normal(*mask_dims)
    got = run_reference(lambda g, q, k, v, m, b: [g.attention(q, k, v, m), g.attention(q, k, v, b)],
                        q, k, v, keep, bias)
    assert_close(got[0], _sdpa(q, k, v, attn_mask=_t(keep)), "f32")
    assert_close(got[1], _sdpa(q, k, v, attn_mask=_t(bias)), "f32")


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # the rows we check are zeros
def test_attention_rows_without_visible_keys_are_zero():
    q, k, v = _qkv(sq=6, sk=3)
    keep = np.ones((6, 3), bool)
    keep[1] = False
    got = run_reference(lambda g, q, k, v, m: [g.attention(q, k, v, "causal"), g.attention(q, k, v, m),
                                               g.attention(q, k, v, "sliding", window=2)], q, k, v, keep)
    # causal with Sk < Sq: query i sees keys j <= i - 3, so the first three rows see none.
    assert np.all(got[0][:, :, :3] == 0)
    from torch.nn.attention.bias import causal_lower_right
    expected = _sdpa(q, k, v, attn_mask=causal_lower_right(6, 3)._materialize())
    assert_close(got[0][:, :, 3:], expected[:, :, 3:], "f32")
    assert np.all(got[1][:, :, 1] == 0) and np.all(np.isfinite(got[1]))
    assert np.all(got[2][:, :, :3] == 0)


def test_attention_empty_keys_give_zeros():
    q, k, v = _qkv(sk=0)
    np.testing.assert_array_equal(run_reference(lambda g, q, k, v: g.attention(q, k, v), q, k, v),
                                  np.zeros((2, 4, 5, 6), np.float32))


def _softcapped(q, k, v, cap, keep):
    """Soft-capped attention written out in torch (SDPA has no softcap)."""
    group = q.shape[1] // k.shape[1]
    k, v = (_t(a).repeat_interleave(group, dim=1) for a in (k, v))
    s = _t(q) @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = (cap * torch.tanh(s / cap)).masked_fill(~_t(keep), -math.inf)
    return (torch.softmax(s, dim=-1) @ v).numpy()


@pytest.mark.parametrize("cap", [0.5, 2.0, 30.0])
def test_attention_softcap_matches_torch(cap):
    q, k, v = _qkv()
    q *= 4  # scores large enough for the cap to matter
    keep = np.tril(np.ones((5, 7), bool), 2)
    got = run_reference(lambda g, q, k, v: g.attention(q, k, v, "causal", softcap=cap), q, k, v)
    assert_close(got, _softcapped(q, k, v, cap, keep), "f32")


def _onnx_past_split(k, v, new):
    """Split keys/values into ONNX's (past, new) inputs: the last ``new`` are new."""
    return k[:, :, :-new], v[:, :, :-new], k[:, :, -new:], v[:, :, -new:]


@pytest.mark.parametrize("sq,sk", [(3, 8), (4, 4), (1, 6)])
@pytest.mark.parametrize("window", [None, 1, 3, 10])
def test_causal_and_sliding_match_onnxruntime_with_a_kv_cache(sq, sk, window):
    """ORT's Attention-25 places the queries after the past keys (offset = past length);
    with Sk - Sq past keys that is exactly our end alignment. ONNX's left_window_size
    counts the keys before the query's own, so it is our window - 1."""
    q, k, v = _qkv(hq=4, hkv=2, sq=sq, sk=sk)
    past_k, past_v, new_k, new_v = _onnx_past_split(k, v, sq)
    attrs = {"is_causal": 1} if window is None else {"is_causal": 1, "left_window_size": window - 1}
    expected = run_onnx_node("Attention", [q, new_k, new_v, None, past_k, past_v], attrs, opset=25, n_outputs=3)[0]
    mode = {"mask": "causal"} if window is None else {"mask": "sliding", "window": window}
    assert_close(run_reference(lambda g, q, k, v: g.attention(q, k, v, **mode), q, k, v), expected, "f32")


def _onnx_attention_bias(case, dtype):
    """ONNX's is_causal / window attributes (queries at positions 0.., no past) and its
    attn_mask, folded into one additive bias for our 'bias' mode."""
    q, k = case.inputs[0], case.inputs[1]
    i, j = np.arange(q.shape[2])[:, None], np.arange(k.shape[2])[None, :]
    allowed = np.ones((q.shape[2], k.shape[2]), bool)
    if case.attrs.get("is_causal"):
        allowed &= j <= i
    left, right = case.attrs.get("left_window_size", -1), case.attrs.get("right_window_size", -1)
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    bias = np.where(allowed, 0.0, -np.inf)
    mask = case.inputs[3] if len(case.inputs) > 3 else None
    if mask is not None:
        bias = bias + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask.astype(np.float64))
    return bias.astype(dtype)


def _plain_4d(case):
    """Cases our op can express directly: 4-D q/k/v, no KV cache, no padded lengths."""
    return case.inputs[0].ndim == 4 and all(a is None for a in case.inputs[4:])


def test_attention_matches_onnx_node_tests():
    cases = [c for c in onnx_node_cases("Attention") if _plain_4d(c)]
    assert len(cases) >= 30, [c.name for c in cases]
    for case in cases:
        q, k, v = case.inputs[:3]
        bias = _onnx_attention_bias(case, q.dtype)
        got = run_reference(lambda g, q, k, v, b: g.attention(q, k, v, b, scale=case.attrs.get("scale"),
                                                               softcap=case.attrs.get("softcap")), q, k, v, bias)
        assert_close(got, case.outputs[0], DType.of(q.dtype), scale=2, what=case.name)


def test_attention_errors_say_what_was_expected():
    g = Graph()
    q, k, v = g.input("q", (2, 4, 5, 8)), g.input("k", (2, 3, 7, 8)), g.input("v", (2, 3, 7, 6))
    with pytest.raises(ShapeError, match=r"query heads \(4\) must be a multiple of the KV heads \(3\)"):
        g.attention(q, k, v)
    k2, v2 = g.input("k2", (2, 2, 7, 8)), g.input("v2", (2, 2, 7, 6))
    with pytest.raises(ShapeError, match="head dims differ: q has D=8, k has D=4"):
        g.attention(q, g.input("k4", (2, 2, 7, 4)), v2)
    with pytest.raises(ShapeError, match=r"q must be \[B, H, S, D\] \(rank 4\), got \[5, 8\]"):
        g.attention(g.input("q2", (5, 8)), k2, v2)
    with pytest.raises(ShapeError, match="k and v must share heads and length"):
        g.attention(q, k2, g.input("v3", (2, 2, 6, 6)))
    with pytest.raises(OpAttributeError, match="mask must be one of none, causal, sliding, custom, bias, got 'tril'"):
        g.attention(q, k2, v2, "tril")
    with pytest.raises(OpAttributeError, match="window is required with mask='sliding'"):
        g.attention(q, k2, v2, "sliding")
    with pytest.raises(OpAttributeError, match="window is required with mask='sliding' and only then"):
        g.attention(q, k2, v2, "causal", window=4)
    with pytest.raises(OpAttributeError, match="window must be >= 1, got 0"):
        g.attention(q, k2, v2, "sliding", window=0)
    with pytest.raises(OpAttributeError, match="softcap must be > 0"):
        g.attention(q, k2, v2, softcap=0.0)
    with pytest.raises(ShapeError, match=r"custom mask \[3, 7\] does not broadcast|cannot broadcast"):
        g.attention(q, k2, v2, g.input("m", (3, 7), "bool"))
    with pytest.raises(ShapeError, match=r"does not broadcast to the scores \[B, Hq, Sq, Sk\] = \[2, 4, 5, 7\]"):
        g.attention(q, k2, v2, g.input("m5", (1, 2, 1, 5, 7), "bool"))
    with pytest.raises(DTypeError, match="attention bias must have the input's dtype f32, got f64"):
        g.attention(q, k2, v2, g.input("b64", (5, 7), "f64"))
    with pytest.raises(ShapeError, match="needs a 4th \\(mask\\) input"):
        g.op("attention", q, k2, v2, mask="custom")
    with pytest.raises(ShapeError, match="takes no 4th input"):
        g.op("attention", q, k2, v2, g.input("m2", (5, 7), "bool"), mask="causal")
    with pytest.raises(DTypeError, match="custom mask must be bool"):
        g.op("attention", q, k2, v2, g.input("m3", (5, 7)), mask="custom")


def test_attention_resolves_the_default_scale():
    g = Graph()
    out = g.attention(g.input("q", (1, 1, 2, 16)), g.input("k", (1, 1, 3, 16)), g.input("v", (1, 1, 3, 4)))
    assert out.node.attrs["scale"] == 0.25


# --- rope ------------------------------------------------------------------------------

def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _hf_rope(x, theta, n_rot, offset=0):
    """GPT-NeoX / HF transformers: q*cos + rotate_half(q)*sin on the first n_rot dims."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, n_rot, 2, dtype=torch.float64) / n_rot))
    freqs = torch.outer(torch.arange(offset, offset + x.shape[-2], dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    rot, rest = x[..., :n_rot], x[..., n_rot:]
    return torch.cat((rot * emb.cos() + _rotate_half(rot) * emb.sin(), rest), dim=-1)


def _meta_rope(x, theta, n_rot, offset=0):
    """Meta's LLaMA / GPT-J: consecutive pairs as complex numbers times e^(i angle)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, n_rot, 2, dtype=torch.float64) / n_rot))
    freqs = torch.outer(torch.arange(offset, offset + x.shape[-2], dtype=torch.float64), inv_freq)
    pairs = torch.view_as_complex(x[..., :n_rot].reshape(*x.shape[:-1], -1, 2).contiguous())
    rotated = torch.view_as_real(pairs * torch.polar(torch.ones_like(freqs), freqs)).flatten(-2)
    return torch.cat((rotated, x[..., n_rot:]), dim=-1)


@pytest.mark.parametrize("dims,n_rot", [((2, 3, 6, 8), 8), ((2, 5, 10), 6), ((7, 4), 2), ((1, 2, 3, 16), 16)])
@pytest.mark.parametrize("style,independent", [("half", _hf_rope), ("interleaved", _meta_rope)])
def test_rope_matches_independent_torch_formulas(dims, n_rot, style, independent):
    x = _normal(*dims, dtype=np.float64)
    cos, sin = rope_tables(dims[-2], n_rot, theta=500.0, offset=3, dtype="f64")
    got = run_reference(lambda g, x: g.rope(x, cos, sin, style=style, n_rot=n_rot), x)
    assert_close(got, independent(_t(x), 500.0, n_rot, offset=3).numpy(), "f64")


def test_rope_matches_onnx_node_tests():
    cases = [c for c in onnx_node_cases("RotaryEmbedding") if c.inputs[0].ndim == 4]
    assert len(cases) >= 6, [c.name for c in cases]
    for case in cases:
        x, cos, sin = case.inputs[:3]
        positions = case.inputs[3] if len(case.inputs) > 3 else None
        style = "interleaved" if case.attrs.get("interleaved") else "half"
        n_rot = case.attrs.get("rotary_embedding_dim") or None
        for b in range(x.shape[0]):  # ONNX tables may differ per batch; ours are shared
            cb, sb = (cos[positions[b]], sin[positions[b]]) if positions is not None else (cos[b], sin[b])
            got = run_reference(lambda g, x: g.rope(x, cb, sb, style=style, n_rot=n_rot), x[b])
            assert_close(got, case.outputs[0][b], "f32", what=case.name)


def test_rope_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (2, 6, 8))
    cos, sin = rope_tables(6, 8)
    with pytest.raises(OpAttributeError, match=r"n_rot must be even and in \[0, D=8\], got 5"):
        g.rope(x, cos, sin, n_rot=5)
    with pytest.raises(OpAttributeError, match="style must be one of half, interleaved, got 'neox'"):
        g.rope(x, cos, sin, style="neox")
    with pytest.raises(ShapeError, match=r"rope cos must have dims \[6, 2\], got \[6, 4\]"):
        g.rope(x, cos, sin, n_rot=4)
    with pytest.raises(ShapeError, match=r"rope needs x \[..., S, D\] of rank >= 2"):
        g.rope(g.input("v", (8,)), cos, sin)
    with pytest.raises(DTypeError, match="rope sin must have the input's dtype f32, got f16"):
        g.rope(x, cos, g.input("s16", (6, 4), "f16"))
    with pytest.raises(OpAttributeError, match="rope_tables n_rot must be even"):
        rope_tables(4, 3)


def test_rope_tables_match_the_hf_formula():
    cos, sin = rope_tables(5, 6, theta=10000.0, offset=2, dtype="f64")
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, 6, 2) / 6))
    angles = np.outer(np.arange(2, 7), inv_freq)
    np.testing.assert_allclose(cos, np.cos(angles), rtol=1e-15)
    np.testing.assert_allclose(sin, np.sin(angles), rtol=1e-15)
    assert rope_tables(3, 4, dtype="bf16")[0].dtype == DType.BF16.np

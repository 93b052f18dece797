"""Normalizations, attention, rotary embeddings, dropout and LRN."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ir.shape import broadcast_dims, normalize_axis
from ..onnx import computed_in_f32, onnx_dtype, onnx_op


# --- normalizations --------------------------------------------------------------------------
@onnx_op("LayerNormalization")
def layer_normalization(ctx):
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, "LayerNormalization axis")
    eps = float(ctx.attr("epsilon", 1e-5))
    y = _affine_norm(ctx, ctx.g.layer_norm, x, axis, eps, ctx.input(1), ctx.input(2))
    if not (ctx.wants(1) or ctx.wants(2)):
        return y
    g, axes = ctx.g, list(range(axis, x.rank))  # the statistics, in the stash type (f32 for low floats)
    wide = g.cast(x, DType.F32) if x.dtype.is_low_float else x
    mean = g.mean(wide, axes, True)
    inv_std = g.reciprocal(g.sqrt(g.mean((wide - mean) * (wide - mean), axes, True) + eps))
    return [y, g.cast(mean, x.dtype), g.cast(inv_std, x.dtype)]


@onnx_op("RMSNormalization")
def rms_normalization(ctx):
    x = ctx.input(0)
    axis = normalize_axis(ctx.attr("axis", -1), x.rank, "RMSNormalization axis")
    return _affine_norm(ctx, ctx.g.rms_norm, x, axis, float(ctx.attr("epsilon", 1e-5)), ctx.input(1), None)


def _affine_norm(ctx, norm, x, axis, eps, scale, bias):
    """``norm`` with gamma/beta broadcast to the normalized dims, as the IR wants them;
    a scale or bias that varies over the leading axes too is applied afterwards."""
    normalized = x.dims[axis:]

    def fits(v):
        return v is None or (v.rank <= len(normalized) and broadcast_dims(v.dims, normalized) == normalized)

    if fits(scale) and fits(bias):
        widen = (lambda v: v if v is None or v.dims == normalized else ctx.g.expand(v, normalized))
        return norm(x, widen(scale), widen(bias), axis=axis, eps=eps)
    ones = ctx.g.constant(np.ones(normalized, x.dtype.np))
    y = norm(x, ones, axis=axis, eps=eps) * scale
    return y if bias is None else y + bias


@onnx_op("GroupNormalization")
def group_normalization(ctx):
    """Opset 21 scales per channel, opset 18 per group (widened to its channels here)."""
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = ctx.attr("num_groups")
    if ctx.version < 21 and x.rank >= 2:
        per_group = np.repeat(np.arange(groups, dtype=np.int64), x.dims[1] // groups)
        scale, bias = ctx.g.gather(scale, per_group), ctx.g.gather(bias, per_group)
    return ctx.g.group_norm(x, scale, bias, num_groups=groups, eps=float(ctx.attr("epsilon", 1e-5)))


@onnx_op("InstanceNormalization")
def instance_normalization(ctx):
    x = ctx.input(0)
    return ctx.g.group_norm(x, ctx.input(1), ctx.input(2), num_groups=x.dims[1],
                            eps=float(ctx.attr("epsilon", 1e-5)))


@onnx_op("BatchNormalization")
@computed_in_f32
def batch_normalization(ctx):
    """Inference: ``(x - mean) / sqrt(var + eps) * scale + bias`` per channel (axis 1).
    ``training_mode``: the batch statistics normalize, and the running statistics come
    out updated by ``momentum``."""
    g = ctx.g
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    eps = float(ctx.attr("epsilon", 1e-5))
    channel = [x.dims[1]] + [1] * (x.rank - 2)
    if not ctx.attr("training_mode", 0):
        return _batch_norm(g, x, mean, var, scale, bias, eps, channel)
    axes = [0] + list(range(2, x.rank))
    batch_mean = g.mean(x, axes)
    centered = x - g.reshape(batch_mean, channel)
    batch_var = g.mean(centered * centered, axes)
    momentum = float(ctx.attr("momentum", 0.9))
    y = _batch_norm(g, x, batch_mean, batch_var, scale, bias, eps, channel)
    return [y, mean * momentum + batch_mean * (1 - momentum), var * momentum + batch_var * (1 - momentum)]


def _batch_norm(g, x, mean, var, scale, bias, eps, channel):
    shaped = [g.reshape(v, channel) for v in (mean, var, scale, bias)]
    mean, var, scale, bias = shaped
    return (x - mean) / g.sqrt(var + eps) * scale + bias


@onnx_op("LRN")
@computed_in_f32
def lrn(ctx):
    """``x / (bias + alpha/size * sum of x^2 over the channel window)^beta``; the window
    sum is a convolution with a ``[size, 1]`` kernel of ones over ``[N, 1, C, H*W]``."""
    g = ctx.g
    x = ctx.input(0)
    size = ctx.attr("size")
    n, c = x.dims[:2]
    rest = math.prod(x.dims[2:])
    squares = g.reshape(x * x, [n, 1, c, rest])
    window = g.conv(squares, np.ones((1, 1, size, 1), x.dtype.np),
                    pads=[(size - 1) // 2, 0, size // 2, 0])
    denom = g.pow(g.reshape(window, x.dims) * (float(ctx.attr("alpha", 1e-4)) / size)
                  + float(ctx.attr("bias", 1.0)), float(ctx.attr("beta", 0.75)))
    return x / denom


@onnx_op("Dropout")
def dropout(ctx):
    """Inference is the identity (mask all true). Training-mode dropout draws ONNX's
    reference generator's numbers, which RLX does not reproduce."""
    x = ctx.input(0)
    ratio = ctx.const(1, np.float32(0.5))
    training = ctx.const(2, np.bool_(False))
    if bool(np.asarray(training).reshape(())) and float(np.asarray(ratio).reshape(())) != 0:
        raise ctx.unsupported("training-mode Dropout with a ratio > 0 (random masks)")
    return [x, np.ones(x.dims, bool)] if ctx.wants(1) else [x]


# --- rotary embeddings ----------------------------------------------------------------------
@onnx_op("RotaryEmbedding")
def rotary_embedding(ctx):
    """``x [B, H, S, D]`` (or ``[B, S, H*D]`` with ``num_heads``), tables ``[B, S, r/2]`` or
    ``[P, r/2]`` indexed by ``position_ids [B, S]``: one IR rope per batch entry, whose
    tables are that entry's rows."""
    g = ctx.g
    x, cos, sin, positions = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    three_d = x.rank == 3
    if three_d:
        heads = ctx.attr("num_heads")
        if not heads:
            raise ctx.error("a 3-D input needs the num_heads attribute")
        b, s, hidden = x.dims
        x = g.transpose(g.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])
    if x.rank != 4:
        raise ctx.error(f"input must be [B, H, S, D] or [B, S, H*D], got {list(x.dims)}")
    if positions is not None:
        cos, sin = g.gather(cos, positions), g.gather(sin, positions)
    style = "interleaved" if ctx.attr("interleaved", 0) else "half"
    n_rot = ctx.attr("rotary_embedding_dim", 0) or None
    parts = [g.rope(g.slice(x, [i], [i + 1], axes=[0]), g.reshape(g.slice(cos, [i], [i + 1], axes=[0]), cos.dims[1:]),
                    g.reshape(g.slice(sin, [i], [i + 1], axes=[0]), sin.dims[1:]), style=style, n_rot=n_rot)
             for i in range(x.dims[0])]
    y = parts[0] if len(parts) == 1 else g.concat(parts, axis=0)
    if three_d:
        y = g.reshape(g.transpose(y, [0, 2, 1, 3]), list(ctx.input(0).dims))
    return y


# --- attention --------------------------------------------------------------------------
@onnx_op("Attention")
def attention(ctx):
    """ONNX Attention (23-25) on the IR's ``attention``: 3-D inputs are split into heads,
    the KV cache is concatenated, and causal / window / padding / user masks become one
    visibility mask or additive bias (ONNX aligns causal masks to the cache length, the
    IR to the end of the keys, so only the matching case keeps the ``causal`` mode).
    Requesting ``qk_matmul_output`` computes the same attention op by op."""
    g = ctx.g
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    three_d = q.rank == 3
    if three_d:
        q = _split_heads(ctx, q, ctx.attr("q_num_heads"))
        k = _split_heads(ctx, k, ctx.attr("kv_num_heads"))
        v = _split_heads(ctx, v, ctx.attr("kv_num_heads"))
    past_k, past_v = ctx.input(4), ctx.input(5)
    if (past_k is None) != (past_v is None):
        raise ctx.error("past_key and past_value must be given together")
    past = past_k.dims[2] if past_k is not None else 0
    if past_k is not None:
        k, v = g.concat([past_k, k], axis=2), g.concat([past_v, v], axis=2)
    mask = _attention_mask(ctx, q, k, past)
    scale = ctx.attr("scale")
    softcap = ctx.attr("softcap") or None
    if ctx.wants(3) or _softmax_dtype(ctx, q) is not q.dtype:
        y, qk = _attention_by_ops(ctx, q, k, v, mask, scale, softcap)
    else:
        mode, window = mask if isinstance(mask, tuple) else (mask if mask is not None else "none", None)
        y, qk = g.attention(q, k, v, mode, window=window, scale=scale, softcap=softcap), None
    if three_d:
        y = g.reshape(g.transpose(y, [0, 2, 1, 3]), [y.dims[0], y.dims[2], y.dims[1] * y.dims[3]])
    return [y, k, v] + ([qk] if qk is not None else [])


def _split_heads(ctx, x, heads):
    if not heads:
        raise ctx.error("3-D inputs need the q_num_heads and kv_num_heads attributes")
    b, s, hidden = x.dims
    return ctx.g.transpose(ctx.g.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def _attention_mask(ctx, q, k, past: int):
    """What hides keys, for the IR: ``"causal"``, ``("sliding", window)``, a bool
    visibility mask or a float bias (a graph value), or None -- ONNX's attn_mask (padded
    to the key length), is_causal, left/right windows and nonpad_kv_seqlen combined."""
    g = ctx.g
    sq, sk = q.dims[2], k.dims[2]
    user = ctx.input(3)
    if user is not None and user.dims[-1] < sk:  # a shorter mask is padded with "hidden"
        fill = 0.0 if user.dtype is DType.BOOL else -math.inf
        user = g.pad(user, [(0, 0)] * (user.rank - 1) + [(0, sk - user.dims[-1])], value=fill)
    causal = bool(ctx.attr("is_causal", 0))
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    nonpad = ctx.input(6)
    if user is None and nonpad is None and past == sk - sq and causal and right in (-1, 0):
        return "causal" if left < 0 else ("sliding", left + 1)
    visible = _positional_visibility(g, sq, sk, past, nonpad, causal, left, right)
    if user is None:
        return visible
    if user.dtype is DType.BOOL:
        return user if visible is None else g.logical_and(user, visible)
    user = g.cast(user, q.dtype)
    return user if visible is None else user + g.where(visible, g.as_value(0.0, q.dtype), -math.inf)


def _positional_visibility(g, sq, sk, past, nonpad, causal, left, right):
    """Which keys each query may see by position (None: all). Query i sits at
    ``p = i + offset`` (offset = the past length, or ``nonpad[b] - sq`` per batch entry);
    ``causal`` keeps ``j <= p``, the windows ``p - left <= j <= p + right``, and
    ``nonpad`` hides keys ``j >= nonpad[b]``."""
    bounds = [(causal, 0, None), (left >= 0, None, left), (right >= 0, -right, None)]  # on diff = p - j
    if nonpad is None and not any(on for on, _, _ in bounds):
        return None
    rel = np.arange(sq, dtype=np.int64)[:, None] - np.arange(sk, dtype=np.int64)[None, :]
    visible = None
    if nonpad is not None:
        lengths = g.reshape(g.cast(nonpad, DType.I64), [-1, 1, 1, 1])
        diff = g.constant(rel) + (lengths - sq)
        visible = g.lt(g.constant(np.arange(sk, dtype=np.int64)), lengths)
    else:
        diff = g.constant(rel + past)
    for on, low, high in bounds:
        if on:
            keep = g.ge(diff, low) if low is not None else g.le(diff, high)
            visible = keep if visible is None else g.logical_and(visible, keep)
    return visible


def _softmax_dtype(ctx, q) -> DType:
    precision = ctx.attr("softmax_precision")
    return q.dtype if precision is None else onnx_dtype(precision)


def _attention_by_ops(ctx, q, k, v, mask, scale, softcap):
    """Attention op by op, for ``qk_matmul_output`` (mode 0: the scaled scores, soft-capped
    when ``softcap`` is set; 1: the same; 2: plus the mask bias; 3: the probabilities)
    and for a ``softmax_precision`` other than the input's."""
    g = ctx.g
    if isinstance(mask, tuple) or mask == "causal":  # spell the IR modes out as a mask
        sq, sk = q.dims[2], k.dims[2]
        diff = np.arange(sq)[:, None] + (sk - sq) - np.arange(sk)[None, :]
        visible = diff >= 0
        if isinstance(mask, tuple):
            visible &= diff < mask[1]
        mask = g.constant(visible)
    hq, hkv = q.dims[1], k.dims[1]
    if hq != hkv:  # query head h reads KV head h // (hq / hkv)
        k, v = (g.reshape(g.expand(g.unsqueeze(t, [2]), t.dims[:2] + (hq // hkv,) + t.dims[2:]),
                          (t.dims[0], hq) + t.dims[2:]) for t in (k, v))
    root = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.dims[3]))
    scores = g.matmul(q * root, g.transpose(k * root, [0, 1, 3, 2]))
    if softcap:
        scores = g.tanh(scores / softcap) * softcap
    bias = None
    if mask is not None:
        bias = g.where(mask, g.as_value(0.0, q.dtype), -math.inf) if mask.dtype is DType.BOOL else mask
        biased = scores + bias
    else:
        biased = scores
    wide = _softmax_dtype(ctx, q)
    probs = g.softmax(g.cast(biased, wide), axis=-1)
    if bias is not None:  # a row whose bias hides every key gets zero weights
        hidden_row = g.eq(g.reduce_max(g.cast(bias, wide), [-1], True), -math.inf)
        probs = g.where(hidden_row, g.as_value(0.0, wide), probs)
    probs = g.cast(probs, q.dtype)
    mode = ctx.attr("qk_matmul_output_mode", 0)
    qk = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
    if qk is None:
        raise ctx.error(f"qk_matmul_output_mode must be 0..3, got {mode}")
    return g.matmul(probs, v), qk

"""Reference kernels of the 'nn' family. Definitions are in ``rlx_core.ir.ops.nn``."""
from __future__ import annotations

import numpy as np

from ..ir.ops.nn import attention_visibility
from .kernels import kernel


def _trailing_axes(x, axis):
    return tuple(range(axis, x.ndim))


def _affine(y, gamma, beta):
    y = y * gamma
    return y if beta is None else y + beta


@kernel("layer_norm")
def layer_norm(x, gamma, beta=None, *, axis, eps):
    axes = _trailing_axes(x, axis)
    centered = x - x.mean(axis=axes, keepdims=True)
    var = (centered * centered).mean(axis=axes, keepdims=True)
    return _affine(centered / np.sqrt(var + eps), gamma, beta)


@kernel("rms_norm")
def rms_norm(x, gamma, beta=None, *, axis, eps):
    mean_square = (x * x).mean(axis=_trailing_axes(x, axis), keepdims=True)
    return _affine(x / np.sqrt(mean_square + eps), gamma, beta)


@kernel("group_norm")
def group_norm(x, gamma, beta, *, num_groups, eps):
    n, c = x.shape[:2]
    grouped = x.reshape((n, num_groups, c // num_groups) + x.shape[2:])
    axes = _trailing_axes(grouped, 2)
    centered = grouped - grouped.mean(axis=axes, keepdims=True)
    var = (centered * centered).mean(axis=axes, keepdims=True)
    y = (centered / np.sqrt(var + eps)).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    return _affine(y, gamma.reshape(per_channel), beta.reshape(per_channel))


@kernel("attention")
def attention(q, k, v, *mask_input, mask, window, scale, softcap):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # query head h -> kv head h // group
    scores = np.matmul(q, k.swapaxes(-1, -2)) * q.dtype.type(scale)
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    if mask == "bias":
        scores = scores + mask_input[0]
    else:
        visible = _visible_keys(mask, q.shape[2], k.shape[2], window, mask_input)
        if visible is not None:
            scores = np.where(visible, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True, initial=-np.inf)
    weights = np.exp(scores - np.where(np.isneginf(top), 0, top))  # rows without keys: all 0
    total = weights.sum(axis=-1, keepdims=True)
    return np.matmul(weights, v) / np.where(total == 0, 1, total).astype(q.dtype)


def _visible_keys(mode, sq, sk, window, mask_input):
    """Bool array broadcastable to the scores (True = visible), or None for all keys."""
    return mask_input[0] if mode == "custom" else attention_visibility(mode, sq, sk, window)


@kernel("rope")
def rope(x, cos, sin, *, style, n_rot):
    return rotate_pairs(np, x, cos, sin, style, n_rot).astype(x.dtype, copy=False)


def rotate_pairs(xp, x, cos, sin, style: str, n_rot: int):
    """RoPE of the first ``n_rot`` features of ``x`` (pairs ``(i, i + n_rot/2)`` for style
    "half", ``(2i, 2i + 1)`` otherwise), the rest passed through. Written without
    assignment into an array, with ``xp`` the array library's numpy-like namespace (numpy,
    ``jax.numpy``, ``mlx.core``), so the reference and the backends whose arrays are
    immutable (tpu, mlx) share one definition."""
    half = n_rot // 2
    if style == "half":
        a, b = x[..., :half], x[..., half:n_rot]
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    first, second = a * cos - b * sin, b * cos + a * sin
    if style == "half":
        rotated = xp.concatenate([first, second], axis=-1)
    else:  # interleave the pairs back: (first_0, second_0, first_1, ...)
        rotated = xp.stack([first, second], axis=-1).reshape(tuple(x.shape[:-1]) + (n_rot,))
    return rotated if n_rot == x.shape[-1] else xp.concatenate([rotated, x[..., n_rot:]], axis=-1)

"""Lowerings of the nn family (definitions: ``rlx_core.ir.ops.nn``)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rlx_core.ir.ops.nn import attention_visibility
from rlx_core.reference.nn import rotate_pairs

from . import is_low_float, lowering
from .linalg import contraction


def _trailing_axes(x, axis):
    return tuple(range(axis, x.ndim))


def _affine(y, gamma, beta):
    y = y * gamma
    return y if beta is None else y + beta


def _normalize(x, axes, eps):
    """(x - mean) / sqrt(biased variance + eps) over ``axes``.

    The mean is taken of the data shifted by its first element (exact differences when
    the mean dwarfs the spread): XLA's f32 sums round more than numpy's pairwise ones,
    and centring is where that error would be magnified."""
    pivot = x[tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))]
    centered = x - (pivot + jnp.mean(x - pivot, axis=axes, keepdims=True))
    var = jnp.mean(centered * centered, axis=axes, keepdims=True)
    return centered / jnp.sqrt(var + eps)


@lowering("layer_norm")
def layer_norm(x, gamma, beta=None, *, axis, eps):
    return _affine(_normalize(x, _trailing_axes(x, axis), eps), gamma, beta)


@lowering("rms_norm")
def rms_norm(x, gamma, beta=None, *, axis, eps):
    mean_square = jnp.mean(x * x, axis=_trailing_axes(x, axis), keepdims=True)
    return _affine(x / jnp.sqrt(mean_square + eps), gamma, beta)


@lowering("group_norm")
def group_norm(x, gamma, beta, *, num_groups, eps):
    n, c = x.shape[:2]
    grouped = x.reshape((n, num_groups, c // num_groups) + x.shape[2:])
    y = _normalize(grouped, _trailing_axes(grouped, 2), eps).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    return _affine(y, gamma.reshape(per_channel), beta.reshape(per_channel))


@lowering("attention", low_float=True)
def attention(q, k, v, *mask_input, mask, window, scale, softcap):
    # 16-bit q and k contract with f32 accumulation; everything after the scores is f32
    # (the widened values), as the reference computes it.
    compute = np.float32 if is_low_float(q.dtype) else q.dtype
    group = q.shape[1] // k.shape[1]
    if group > 1:  # query head h reads kv head h // group
        k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, **contraction(q.dtype)).astype(compute)
    scores = scores * np.asarray(scale, compute)
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    if mask == "bias":
        scores = scores + mask_input[0].astype(compute)
    else:
        visible = _visible_keys(mask, q.shape[2], k.shape[2], window, mask_input)
        if visible is not None:
            scores = jnp.where(visible, scores, -jnp.inf)
    return _softmax_product(scores, v.astype(compute))


def _softmax_product(scores, v):
    """``softmax(scores) @ v`` as the reference computes it -- ``exp(s - max s) @ v`` divided
    by the row sum -- with rows without a visible key (all scores -inf) giving zeros.

    The guard is written so that XLA keeps the max, the exponentials and the sum in one
    fusion: the max is taken of the scores floored at the lowest finite value (a floor
    below every finite score, so only an all -inf row sees it, and its exponentials are
    then exp(-inf) = 0), and the sum is divided out after ``max(total, 1)`` (a row's sum
    is 0 exactly when it has no visible key, else >= 1: its largest term is exp(0)).
    NaN and +inf propagate as in the reference.
    """
    floor = np.finfo(scores.dtype).min
    top = jnp.max(jnp.maximum(scores, floor), axis=-1, keepdims=True, initial=None if scores.shape[-1] else floor)
    weights = jnp.exp(scores - top)
    total = jnp.sum(weights, axis=-1, keepdims=True)
    return jnp.einsum("bhqk,bhkd->bhqd", weights, v, **contraction(v.dtype)) / jnp.maximum(total, 1)


def _visible_keys(mode, sq, sk, window, mask_input):
    """Bool array broadcastable to the scores (True = visible), or None for all keys."""
    return mask_input[0] if mode == "custom" else attention_visibility(mode, sq, sk, window)


@lowering("rope")
def rope(x, cos, sin, *, style, n_rot):
    return rotate_pairs(jnp, x, cos, sin, style, n_rot)

"""Lowerings of the nn family (definitions: ``rlx_core.ir.ops.nn``).

``mx.fast`` kernels are used where their definition is the op's:

* ``layer_norm`` / ``rms_norm``: ``mx.fast.layer_norm`` / ``mx.fast.rms_norm`` over the
  normalized axes flattened into one (biased variance, ``eps`` inside the root, then
  ``* gamma + beta``), on f32 values for 16-bit inputs (so the result is rounded once);
  layer norm first subtracts each row's first element (the result is shift-invariant)
  so that MLX's f32 sums stay exact for data far from zero. f64 is composed (the fast
  kernels compute in f32);
* ``attention``: ``mx.fast.scaled_dot_product_attention`` (GQA included) for masks
  ``none`` and ``causal`` without a soft cap, where every query row sees at least one
  key (``Sk >= Sq``): MLX's causal mask aligns queries to the end of the keys, as the op
  does. Other cases -- sliding windows, custom and bias masks, soft caps, rows without a
  visible key (which give zeros here, NaN in ``mx.fast``), f64 -- are composed (f64
  exponentials through ``elementwise.exp``).

``rope`` is composed: ``mx.fast.rope`` computes its own angles from a base frequency,
where the op takes the cos/sin tables as inputs. ``group_norm`` is composed.
"""
from __future__ import annotations

import math

import mlx.core as mx

from rlx_core.ir.ops.nn import attention_visibility
from rlx_core.reference.nn import rotate_pairs

from . import lowering
from .elementwise import exp


def _flat_trailing(x, axis):
    """``x`` with the axes ``axis..`` flattened into one (a view)."""
    return x.reshape(tuple(x.shape[:axis]) + (math.prod(x.shape[axis:]),))


def _affine(y, gamma, beta):
    y = y * gamma
    return y if beta is None else y + beta


def _normalize(x, axes, eps):
    """(x - mean) / sqrt(biased variance + eps) over ``axes``, composed."""
    centered = x - mx.mean(x, axis=axes, keepdims=True)
    var = mx.mean(centered * centered, axis=axes, keepdims=True)
    return centered / mx.sqrt(var + eps)


@lowering("layer_norm")
def layer_norm(x, gamma, beta=None, *, axis, eps):
    if x.size == 0:
        return x
    if x.dtype == mx.float64:  # mx.fast works in f32 internally
        return _affine(_normalize(x, tuple(range(axis, x.ndim)), eps), gamma, beta)
    flat = _flat_trailing(x, axis)
    # Layer norm is invariant under a shift of each row: taking its first element off
    # first makes the differences exact where the mean dwarfs the spread, which MLX's
    # f32 sums would otherwise magnify.
    flat = flat - flat[..., :1]
    y = mx.fast.layer_norm(flat, gamma.reshape(-1), None if beta is None else beta.reshape(-1), eps)
    return y.reshape(x.shape)


@lowering("rms_norm")
def rms_norm(x, gamma, beta=None, *, axis, eps):
    if x.size == 0:
        return x
    if x.dtype == mx.float64:  # mx.fast works in f32 internally
        mean_square = mx.mean(x * x, axis=tuple(range(axis, x.ndim)), keepdims=True)
        return _affine(x / mx.sqrt(mean_square + eps), gamma, beta)
    y = mx.fast.rms_norm(_flat_trailing(x, axis), gamma.reshape(-1), eps).reshape(x.shape)
    return y if beta is None else y + beta


@lowering("group_norm")
def group_norm(x, gamma, beta, *, num_groups, eps):
    if x.size == 0:
        return x
    n, c = x.shape[:2]
    grouped = x.reshape((n, num_groups, c // num_groups) + tuple(x.shape[2:]))
    y = _normalize(grouped, tuple(range(2, grouped.ndim)), eps).reshape(x.shape)
    per_channel = (c,) + (1,) * (x.ndim - 2)
    return _affine(y, gamma.reshape(per_channel), beta.reshape(per_channel))


def _fast_attention_fits(q, k, mask, softcap) -> bool:
    b, hq, sq, d = q.shape
    sk = k.shape[2]
    return (q.dtype == mx.float32 and softcap is None and mask in ("none", "causal")
            and min(b, hq, sq, d, sk) > 0 and sk >= sq)


@lowering("attention")
def attention(q, k, v, *mask_input, mask, window, scale, softcap):
    # 16-bit q, k and v arrive as f32 values: the scores, softmax and value product are
    # f32 as the reference computes them, rounded once at the end.
    out_dims = tuple(q.shape[:3]) + (v.shape[3],)
    if 0 in out_dims:
        return mx.zeros(out_dims, q.dtype)
    if _fast_attention_fits(q, k, mask, softcap):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale,
                                                    mask="causal" if mask == "causal" else None)
    group = q.shape[1] // k.shape[1]
    if group > 1:  # query head h reads kv head h // group
        k, v = mx.repeat(k, group, axis=1), mx.repeat(v, group, axis=1)
    scores = mx.matmul(q, k.swapaxes(-1, -2)) * mx.array(scale, q.dtype)
    if softcap is not None:
        scores = softcap * mx.tanh(scores / softcap)
    if mask == "bias":
        scores = scores + mask_input[0]
    else:
        visible = mask_input[0] if mask == "custom" else attention_visibility(mask, q.shape[2], k.shape[2], window)
        if visible is not None:
            visible = mx.array(visible) if not isinstance(visible, mx.array) else visible
            scores = mx.where(visible, scores, mx.array(-math.inf, scores.dtype))
    return _softmax_product(scores, v)


def _softmax_product(scores, v):
    """``softmax(scores) @ v`` as the reference computes it -- ``exp(s - max s) @ v`` divided
    by the row sum -- with rows without a visible key (all scores -inf) giving zeros: the
    max is taken of the scores floored at the lowest finite value, and the sum divided
    out after ``max(total, 1)`` (a row's sum is 0 exactly when it has no visible key,
    else >= 1). NaN and +inf propagate as in the reference."""
    if scores.shape[-1] == 0:
        return mx.zeros(tuple(scores.shape[:-1]) + (v.shape[-1],), scores.dtype)
    floor = mx.array(mx.finfo(scores.dtype).min, scores.dtype)
    top = mx.max(mx.maximum(scores, floor), axis=-1, keepdims=True)
    weights = exp(scores - top)
    total = mx.sum(weights, axis=-1, keepdims=True)
    return mx.matmul(weights, v) / mx.maximum(total, 1)


@lowering("rope")
def rope(x, cos, sin, *, style, n_rot):
    return rotate_pairs(mx, x, cos, sin, style, n_rot)

"""Neural-network building blocks: normalizations, scaled dot-product attention, RoPE.

Every kind here takes floating-point tensors; their auxiliary float inputs (gamma,
beta, cos/sin tables, an additive attention bias) must have the first input's dtype.
The builder methods turn Python numbers and arrays given for them into constants of
that dtype. 16-bit floats are computed in f32 and rounded once (the reference rule).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import DTypeError, OpAttributeError, ShapeError
from ..dtypes import FLOATS, DType
from ..node import Value
from ..schema import Attr, op
from ..shape import Shape, broadcast_dims, normalize_axis

__all__ = ["rope_tables", "value_like", "expect_like", "ATTENTION_MASKS", "ROPE_STYLES"]

ATTENTION_MASKS = ("none", "causal", "sliding", "custom", "bias")
ROPE_STYLES = ("half", "interleaved")

_NORM_ATTRS = {
    "axis": Attr("int", -1, "first normalized axis: axes axis..rank-1 are normalized together"),
    "eps": Attr("float", 1e-5, "added to the variance (mean square) before the square root"),
}


def expect_like(kind: str, what: str, x: Shape, s: Shape, dims=None) -> None:
    """Input ``what`` must have ``x``'s dtype (and dims ``dims`` when given)."""
    if s.dtype is not x.dtype:
        raise DTypeError(f"{kind} {what} must have the input's dtype {x.dtype}, got {s.dtype}")
    if dims is not None and s.dims != tuple(dims):
        raise ShapeError(f"{kind} {what} must have dims {list(dims)}, got {list(s.dims)}")


def _affine_norm(kind: str, a, x: Shape, gamma: Shape, beta: "Shape | None") -> Shape:
    a.axis = normalize_axis(a.axis, x.rank, f"{kind} axis")
    if a.eps < 0 or not math.isfinite(a.eps):
        raise OpAttributeError(f"{kind} eps must be a finite number >= 0, got {a.eps}")
    normalized = x.dims[a.axis:]
    expect_like(kind, "gamma", x, gamma, normalized)
    if beta is not None:
        expect_like(kind, "beta", x, beta, normalized)
    return x


@op("layer_norm", inputs=("x", "gamma", "beta?"), attrs=dict(_NORM_ATTRS), dtypes=FLOATS)
def layer_norm(a, x, gamma, beta=None):
    """Layer normalization (ONNX LayerNormalization, torch ``F.layer_norm``).

    Over the normalized axes ``axis..rank-1`` (one group per index of the leading
    axes): ``y = (x - mean) / sqrt(var + eps) * gamma + beta`` where ``var`` is the
    biased variance ``mean((x - mean)**2)``. ``gamma`` and the optional ``beta`` have
    exactly the normalized dims ``x.dims[axis:]``; without ``beta`` nothing is added.
    """
    return _affine_norm("layer_norm", a, x, gamma, beta)


@op("rms_norm", inputs=("x", "gamma", "beta?"), attrs=dict(_NORM_ATTRS), dtypes=FLOATS)
def rms_norm(a, x, gamma, beta=None):
    """Root-mean-square normalization (ONNX RMSNormalization, torch ``F.rms_norm``).

    Over the normalized axes ``axis..rank-1``:
    ``y = x / sqrt(mean(x**2) + eps) * gamma + beta``. ``gamma`` and the optional
    ``beta`` have exactly the normalized dims ``x.dims[axis:]``.
    """
    return _affine_norm("rms_norm", a, x, gamma, beta)


@op("group_norm", inputs=("x", "gamma", "beta"), dtypes=FLOATS,
    attrs={"num_groups": Attr("int", doc="channel groups; C must be a multiple of it"),
           "eps": Attr("float", 1e-5, "added to the variance before the square root")})
def group_norm(a, x, gamma, beta):
    """Group normalization (torch ``F.group_norm``, ONNX GroupNormalization-21).

    ``x`` is ``[N, C, *spatial]`` (rank >= 2). The C channels are split into
    ``num_groups`` consecutive groups of ``C / num_groups``; each (sample, group) is
    normalized with the mean and biased variance over its channels and all spatial
    positions: ``(x - mean) / sqrt(var + eps)``. Then every channel c is scaled and
    shifted by its own ``gamma[c]`` and ``beta[c]`` (both ``[C]``; per channel, as in
    torch and ONNX opset 21, not per group as in opset 18).
    """
    if x.rank < 2:
        raise ShapeError(f"group_norm needs x [N, C, ...] of rank >= 2, got {list(x.dims)}")
    c = x.dims[1]
    if a.num_groups < 1 or c % a.num_groups:
        raise OpAttributeError(f"group_norm num_groups must be >= 1 and divide the {c} channels, "
                               f"got {a.num_groups}")
    if a.eps < 0 or not math.isfinite(a.eps):
        raise OpAttributeError(f"group_norm eps must be a finite number >= 0, got {a.eps}")
    expect_like("group_norm", "gamma", x, gamma, (c,))
    expect_like("group_norm", "beta", x, beta, (c,))
    return x


def attention_visibility(mode: str, sq: int, sk: int, window: int | None):
    """The static part of attention's mask: a bool ``[sq, sk]`` array (True = the key is
    visible) for ``causal`` and ``sliding``, None for the other modes. Queries sit at the
    end of the keys: query ``i`` is at position ``p = i + sk - sq``; causal shows keys
    ``j <= p``, sliding with window ``w`` shows ``p - w < j <= p``."""
    if mode not in ("causal", "sliding"):
        return None
    pos = np.arange(sq)[:, None] + (sk - sq)
    key = np.arange(sk)[None, :]
    visible = key <= pos
    return visible & (key > pos - window) if mode == "sliding" else visible


@op("attention", inputs=("q", "k", "v", "mask?"), dtypes=FLOATS, attrs={
    "mask": Attr("str", "none", "none | causal | sliding | custom (bool input) | bias (float input)"),
    "window": Attr("int", None, "sliding-window length (keys per query, the query's own included)",
                   optional=True),
    "scale": Attr("float", None, "score scale; default 1/sqrt(D)", optional=True),
    "softcap": Attr("float", None, "c in s = c * tanh(s / c), applied before masking", optional=True)})
def attention(a, q, k, v, mask=None):
    """Scaled dot-product attention with grouped KV heads (GQA / MQA).

    Shapes: ``q [B, Hq, Sq, D]``, ``k [B, Hkv, Sk, D]``, ``v [B, Hkv, Sk, Dv]`` ->
    ``[B, Hq, Sq, Dv]``. ``Hq`` must be a multiple of ``Hkv``; query head ``h`` uses
    KV head ``h // (Hq / Hkv)``.

    For query ``i`` and key ``j``: ``s = scale * (q_i . k_j)`` (``scale`` defaults to
    ``1/sqrt(D)``, or 1 when ``D == 0``, and is stored resolved); with ``softcap`` c,
    ``s = c * tanh(s / c)``. Then the mask applies, and the output row is
    ``sum_j softmax(s)_j v_j`` over the visible keys. Queries are aligned to the END of
    the keys: query ``i`` sits at position ``p = i + Sk - Sq`` (the usual layout when
    the keys hold a KV cache followed by the new tokens).

    * ``none``: every key is visible.
    * ``causal``: key ``j`` is visible iff ``j <= p``.
    * ``sliding`` (needs ``window`` w >= 1): iff ``p - w < j <= p``, i.e. the w most
      recent keys up to and including position p.
    * ``custom``: a 4th bool input broadcastable to ``[B, Hq, Sq, Sk]``; True = visible.
    * ``bias``: a 4th input of q's dtype broadcastable to ``[B, Hq, Sq, Sk]``, added
      to the (soft-capped) scores; ``-inf`` hides a key.

    A query row with no visible key (every score ``-inf``, e.g. ``Sk < Sq`` under
    ``causal``) outputs zeros rather than NaN.
    """
    _check_attention_shapes(q, k, v)
    if a.mask not in ATTENTION_MASKS:
        raise OpAttributeError(f"attention mask must be one of {', '.join(ATTENTION_MASKS)}, got {a.mask!r}")
    _check_attention_mask_input(a.mask, q, k, mask)
    if (a.mask == "sliding") != (a.window is not None):
        raise OpAttributeError("attention window is required with mask='sliding' and only then, "
                               f"got mask={a.mask!r}, window={a.window}")
    if a.window is not None and a.window < 1:
        raise OpAttributeError(f"attention window must be >= 1, got {a.window}")
    if a.softcap is not None and not a.softcap > 0:
        raise OpAttributeError(f"attention softcap must be > 0, got {a.softcap}")
    if a.scale is None:
        a.scale = 1.0 / math.sqrt(q.dims[3]) if q.dims[3] else 1.0
    return Shape(q.dims[:3] + v.dims[3:], q.dtype)


def _check_attention_shapes(q: Shape, k: Shape, v: Shape) -> None:
    for name, s in (("q", q), ("k", k), ("v", v)):
        if s.rank != 4:
            raise ShapeError(f"attention {name} must be [B, H, S, D] (rank 4), got {list(s.dims)}")
        expect_like("attention", name, q, s)
    (b, hq, _, d), (bk, hkv, sk, dk), (bv, hv, sv, _) = q.dims, k.dims, v.dims
    if not (b == bk == bv):
        raise ShapeError(f"attention batch sizes differ: q {b}, k {bk}, v {bv}")
    if dk != d:
        raise ShapeError(f"attention head dims differ: q has D={d}, k has D={dk}")
    if hv != hkv or sv != sk:
        raise ShapeError(f"attention k and v must share heads and length: k {list(k.dims)}, v {list(v.dims)}")
    if hkv == 0 or hq % hkv:
        raise ShapeError(f"attention query heads ({hq}) must be a multiple of the KV heads ({hkv})")


def _check_attention_mask_input(mode: str, q: Shape, k: Shape, mask: "Shape | None") -> None:
    takes_input = mode in ("custom", "bias")
    if takes_input != (mask is not None):
        raise ShapeError(f"attention mask={mode!r} " + ("needs a 4th (mask) input" if takes_input
                                                        else "takes no 4th input, but one was given"))
    if mask is None:
        return
    if mode == "custom" and mask.dtype is not DType.BOOL:
        raise DTypeError(f"attention custom mask must be bool (True = attend), got {mask.dtype}")
    if mode == "bias":
        expect_like("attention", "bias", q, mask)
    scores = q.dims[:3] + (k.dims[2],)
    if mask.rank > 4 or broadcast_dims(mask.dims, scores, what="attention mask and scores") != scores:
        raise ShapeError(f"attention {mode} mask {list(mask.dims)} does not broadcast to the scores "
                         f"[B, Hq, Sq, Sk] = {list(scores)}")


@op("rope", inputs=("x", "cos", "sin"), dtypes=FLOATS, attrs={
    "style": Attr("str", "half", "half (NeoX rotate-half) | interleaved (GPT-J)"),
    "n_rot": Attr("int", None, "rotated leading dims of D (even); default D", optional=True)})
def rope(a, x, cos, sin):
    """Rotary position embedding on the last two axes ``[..., S, D]`` of ``x``.

    The first ``n_rot`` features (default all D; even) form ``n_rot/2`` pairs; pair i
    at sequence position s is rotated by the angle whose cosine and sine are
    ``cos[s, i]`` and ``sin[s, i]`` (tables ``[S, n_rot/2]``, shared by all leading
    dims; see ``rope_tables``): ``(a, b) -> (a cos - b sin, b cos + a sin)``.

    * ``half`` (GPT-NeoX / HF ``rotate_half``): pair i is features ``(i, i + n_rot/2)``.
    * ``interleaved`` (GPT-J): pair i is features ``(2i, 2i + 1)``.

    Features ``n_rot..D-1`` are copied unchanged.
    """
    if x.rank < 2:
        raise ShapeError(f"rope needs x [..., S, D] of rank >= 2, got {list(x.dims)}")
    if a.style not in ROPE_STYLES:
        raise OpAttributeError(f"rope style must be one of {', '.join(ROPE_STYLES)}, got {a.style!r}")
    seq, d = x.dims[-2:]
    if a.n_rot is None:
        a.n_rot = d
    if a.n_rot < 0 or a.n_rot > d or a.n_rot % 2:
        raise OpAttributeError(f"rope n_rot must be even and in [0, D={d}], got {a.n_rot}")
    table = (seq, a.n_rot // 2)
    expect_like("rope", "cos", x, cos, table)
    expect_like("rope", "sin", x, sin, table)
    return x


def rope_tables(seq: int, n_rot: int, theta: float = 10000.0, offset: int = 0,
                dtype="f32") -> tuple[np.ndarray, np.ndarray]:
    """The ``(cos, sin)`` tables ``[seq, n_rot/2]`` of standard RoPE.

    Position ``s`` (counting from ``offset``, e.g. the KV-cache length during decoding)
    and pair ``i`` get the angle ``(offset + s) * theta ** (-2i / n_rot)``. Computed in
    f64, returned in ``dtype``.
    """
    if n_rot % 2 or n_rot < 0:
        raise OpAttributeError(f"rope_tables n_rot must be even and >= 0, got {n_rot}")
    inv_freq = theta ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    angles = np.outer(np.arange(offset, offset + seq, dtype=np.float64), inv_freq)
    np_dtype = DType.of(dtype).np
    return np.cos(angles).astype(np_dtype), np.sin(angles).astype(np_dtype)


def value_like(graph, x: Value, v) -> Value:
    """``v`` as a value of ``graph``: Values pass through, numbers/arrays become
    constants of ``x``'s dtype (for auxiliary inputs such as gamma, cos, bias)."""
    return graph.as_value(v, None if isinstance(v, Value) else x.dtype)


class NnBuilders:
    def _norm(self, kind, x, gamma, beta, attrs, shape, name):
        x = self.as_value(x)
        ins = [x, value_like(self, x, gamma)] + ([] if beta is None else [value_like(self, x, beta)])
        return self.add_node(kind, ins, attrs, shape=shape, name=name)

    def layer_norm(self, x, gamma, beta=None, *, axis=-1, eps=1e-5, shape=None, name=None):
        """Layer normalization over axes ``axis..`` (see the ``layer_norm`` op kind)."""
        return self._norm("layer_norm", x, gamma, beta, {"axis": axis, "eps": eps}, shape, name)

    def rms_norm(self, x, gamma, beta=None, *, axis=-1, eps=1e-5, shape=None, name=None):
        """RMS normalization over axes ``axis..`` (see the ``rms_norm`` op kind)."""
        return self._norm("rms_norm", x, gamma, beta, {"axis": axis, "eps": eps}, shape, name)

    def group_norm(self, x, gamma, beta, *, num_groups, eps=1e-5, shape=None, name=None):
        """Group normalization of ``[N, C, ...]`` (see the ``group_norm`` op kind)."""
        return self._norm("group_norm", x, gamma, beta, {"num_groups": num_groups, "eps": eps}, shape, name)

    def attention(self, q, k, v, mask="none", *, window=None, scale=None, softcap=None, shape=None, name=None):
        """Scaled dot-product attention (see the ``attention`` op kind).

        ``mask`` is a mode name ("none", "causal", "sliding" with ``window``), or a
        tensor: a bool one selects "custom" (True = attend), a float one "bias".
        """
        ins = [self.as_value(q), self.as_value(k), self.as_value(v)]
        if isinstance(mask, str):
            mode = mask
        else:
            mask = self.as_value(mask) if isinstance(mask, Value) or np.asarray(mask).dtype == bool \
                else value_like(self, ins[0], mask)
            mode = "custom" if mask.dtype is DType.BOOL else "bias"
            ins.append(mask)
        attrs = {"mask": mode, "window": window, "scale": scale, "softcap": softcap}
        return self.add_node("attention", ins, attrs, shape=shape, name=name)

    def rope(self, x, cos, sin, *, style="half", n_rot=None, shape=None, name=None):
        """Rotary position embedding (see the ``rope`` op kind and ``rope_tables``)."""
        x = self.as_value(x)
        return self.add_node("rope", (x, value_like(self, x, cos), value_like(self, x, sin)),
                             {"style": style, "n_rot": n_rot}, shape=shape, name=name)

"""Scaled dot-product attention written out by exporters, back to the ``attention`` op.

    scores = (q * c1) @ (kT * c2)        # kT: [.., D, Sk]; c1, c2 optional one-element constants
    scores = scores * c  |  scores / c   # optional, any number of one-element constants
    scores = scores + bias               # optional mask: an additive float tensor,
           | where(cond, -inf, scores)   #   or a bool tensor selecting -inf (either polarity)
    out    = softmax(scores, axis=-1) @ v

q, kT and v are rank 4 ``[B, H, ., .]`` (or rank 3 ``[B*H, ., .]``) with equal leading
dims; k is taken back from kT by a transpose (the movement pass merges it with the
exporter's own). The scale is ``c * c1 * c2``. A constant mask is classified: the
causal pattern becomes ``mask="causal"``, all-visible no mask, anything else a
constant ``custom`` mask; a 0/-inf constant bias is treated the same way. A constant
mask that hides every key of some query row is left alone (the written-out softmax
gives NaN there, the op zeros). A mask computed at run time becomes ``custom`` (bool)
or ``bias`` (float): the op matches the written-out form except in a row whose every
key is hidden, where the written-out softmax gives NaN and the op gives zeros.

The scores, probabilities and the steps between them must be used by nothing else
(otherwise they would be computed twice).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Ref
from ..ir.ops.nn import attention_visibility
from .edit import Match, apply_matches
from .pattern import const_array, factors

__all__ = ["fuse_attention"]


@dataclass(frozen=True)
class _Mask:
    """The op's mask: ``mode``, and its input -- a value of the graph (``ref``, negated
    first when ``negate``) or a constant (``value``) -- for custom and bias."""

    mode: str
    ref: Ref | None = None
    value: np.ndarray | None = None
    negate: bool = False


def fuse_attention(graph: Graph) -> tuple[Graph, list[str]]:
    return apply_matches(graph, _find)


def _find(graph: Graph, node: Node, uses) -> Match | None:
    if node.kind != "matmul" or not node.outputs[0].dtype.is_float:
        return None
    p_ref, v_ref = node.inputs
    p = graph.nodes[p_ref.node]
    dims = p.outputs[0].dims
    if p.kind != "softmax" or uses[p_ref] != 1 or len(dims) not in (3, 4) or p.attrs["axis"] != len(dims) - 1:
        return None
    found = _mask(graph, p.inputs[0], dims, uses)
    if found is None:
        return None
    mask, w_ref, covers = found
    coef, powers, scale_nodes = factors(graph, w_ref)
    if len(powers) != 1 or next(iter(powers.values())) != 1:
        return None
    s_ref = next(iter(powers))
    s = graph.nodes[s_ref.node]
    if s.kind != "matmul" or uses[s_ref] != 1 or s.outputs[0].dims != dims or (
            w_ref != s_ref and uses[w_ref] != 1):
        return None
    q_ref, qc, q_nodes = _scaled(graph, s.inputs[0])
    kt_ref, kc, k_nodes = _scaled(graph, s.inputs[1])
    if q_ref is None or kt_ref is None:
        return None
    q, kt, v = (graph.shape_of(r) for r in (q_ref, kt_ref, v_ref))
    if not (q.rank == kt.rank == v.rank == len(dims)) or not (q.dims[:-2] == kt.dims[:-2] == v.dims[:-2]) \
            or v.dims[-2] != kt.dims[-1] or q.dims[-1] == 0:
        return None
    scale = float(coef * qc * kc)
    covers = covers | scale_nodes | q_nodes | k_nodes | {p.id, s.id}
    emit = _emitter(q_ref, kt_ref, v_ref, mask, scale, len(dims))
    return Match(node.id, frozenset(covers), emit, f"attention (mask={mask.mode}, scale={scale:.6g})")


def _scaled(graph: Graph, ref: Ref):
    """``(value, coefficient, nodes)`` when ``ref`` is a value times one-element constants."""
    coef, powers, nodes = factors(graph, ref)
    if len(powers) != 1 or next(iter(powers.values())) != 1:
        return None, None, None
    value = next(iter(powers))
    return (value, coef, nodes) if graph.shape_of(value).dims == graph.shape_of(ref).dims else (None, None, None)


def _mask(graph: Graph, z_ref: Ref, dims, uses):
    """``(mask, scores ref, nodes)`` for the masking step producing ``z_ref`` (mode none
    when there is none), or None when it cannot be the op's."""
    z = graph.nodes[z_ref.node]
    if z.kind == "where":
        cond, a, b = z.inputs
        for fill, w, hidden_when in ((a, b, True), (b, a, False)):
            arr = const_array(graph, fill)
            if arr is not None and arr.size and np.all(np.isneginf(arr)) and graph.shape_of(w).dims == dims \
                    and z.outputs[0].dims == dims and uses[z_ref] == 1:
                break
        else:
            return None
        cond_value = const_array(graph, cond)
        if cond_value is None:
            return _Mask("custom", ref=cond, negate=hidden_when), w, {z.id}
        return _classify(cond_value != hidden_when, dims, w, {z.id})
    if z.kind == "add" and uses[z_ref] == 1 and z.outputs[0].dims == dims:
        for w, bias in (z.inputs, z.inputs[::-1]):
            if graph.shape_of(w).dims == dims and graph.nodes[w.node].kind in ("matmul", "mul", "div", "neg"):
                break
        else:
            return None
        value = const_array(graph, bias)
        if graph.shape_of(bias).rank > 4:
            return None
        if value is None:
            return _Mask("bias", ref=bias), w, {z.id}
        if np.all((value == 0) | np.isneginf(value)):
            return _classify(value == 0, dims, w, {z.id})
        rows = np.broadcast_to(value, (value.shape[:-1] if value.ndim else ()) + dims[-1:])
        if np.any(np.all(np.isneginf(rows), axis=-1)):
            return None
        return _Mask("bias", ref=bias), w, {z.id}
    return _Mask("none"), z_ref, set()


def _classify(visible: np.ndarray, dims, w: Ref, nodes):
    """The mode for a constant ``visible`` mask (True = the key is seen) over scores ``dims``."""
    if visible.ndim > 4:
        return None
    shape = (1,) * (len(dims) - visible.ndim) + visible.shape if visible.ndim <= len(dims) else visible.shape
    rows = np.broadcast_to(visible.reshape(shape), shape[:-2] + tuple(dims[-2:]))
    if not rows.any(axis=-1).all():
        return None  # some query sees no key: written out that is NaN, the op gives zeros
    if rows.all():
        return _Mask("none"), w, nodes
    if np.array_equal(rows, np.broadcast_to(attention_visibility("causal", *dims[-2:], None), rows.shape)):
        return _Mask("causal"), w, nodes
    return _Mask("custom", value=np.ascontiguousarray(visible)), w, nodes


def _emitter(q_ref, kt_ref, v_ref, mask: _Mask, scale: float, rank: int):
    def emit(new: Graph, lookup):
        q, kt, v = lookup(q_ref), lookup(kt_ref), lookup(v_ref)
        if rank == 3:  # [B*H, S, D] -> [1, B*H, S, D]
            q, kt, v = (new.reshape(t, (1,) + t.dims) for t in (q, kt, v))
        k = new.transpose(kt, (0, 1, 3, 2))
        if mask.value is not None:
            m = new.constant(mask.value)
        elif mask.ref is not None:
            m = new.logical_not(lookup(mask.ref)) if mask.negate else lookup(mask.ref)
        else:
            m = mask.mode
        y = new.attention(q, k, v, m, scale=scale)
        return [new.reshape(y, y.dims[1:]) if rank == 3 else y]
    return emit

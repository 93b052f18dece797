"""Attention, softmax and the standalone norms.

Attention computes, per (batch, kv head), ``scores = q k^T`` with one batched BLAS
call into a scratch buffer, turns them into weights in place (scale, soft cap, mask,
softmax: one numba kernel, no other intermediates) and multiplies by ``v`` straight
into the output. Grouped KV heads are broadcast views, never copies.
"""
from __future__ import annotations

import numpy as np

from rlx_core import DType, Graph, Shape

from ..jit import library, specialize
from ..jit.codegen import LEAF, Program, ScalarOp
from ..schedule import Step
from . import Bound, Call, kernel
from .fused import Fusion, rows_call

_FAST = frozenset({DType.F32, DType.F64})
_MASK_MODES = {"none": 0, "causal": 1, "sliding": 2}  # custom and bias masks are inputs


def attention_scratch(step: Step, graph: Graph) -> list[Shape]:
    b, hq, sq, _ = step.node.shape.dims
    sk = graph.shape_of(step.node.inputs[1]).dims[2]
    return [Shape((b, hq, sq, sk), step.node.shape.dtype)] if step.node.shape.dtype in _FAST else []


@kernel("attention", scratch=attention_scratch)
def attention_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    q, k, v = b.ins[:3]
    out, scores = b.outs[0], b.scratch[0]
    batch, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    group = hq // hkv
    q5 = _split_heads(q, hkv, group)  # query head h uses kv head h // group
    kt5 = _split_heads(k, hkv, 1).swapaxes(-1, -2)
    v5 = _split_heads(v, hkv, 1)
    s5 = _split_heads(scores, hkv, group)
    o5 = _split_heads(out, hkv, group)
    a = node.attrs
    mode = a["mask"] if a["mask"] in _MASK_MODES else "none"
    weights = (np.reshape(scores, (batch * hq, sq, sk), copy=False), q.dtype.type(a["scale"]), _MASK_MODES[mode],
               a["window"] or 0)
    calls = [Call(np.matmul, (q5, kt5), {"out": s5})]
    if a["softcap"] is not None or a["mask"] in ("custom", "bias"):  # a separate pass, then plain weights
        empty = np.empty((0,) * 4, np.bool_)
        visible = np.broadcast_to(b.ins[3], scores.shape) if a["mask"] == "custom" else empty
        bias = np.broadcast_to(b.ins[3], scores.shape) if a["mask"] == "bias" else empty.astype(q.dtype)
        prepare = (scores, weights[1], q.dtype.type(a["softcap"] or 0), visible, bias)
        calls.append(Call(specialize(library().attention_scores, *prepare), prepare))
        weights = weights[:1] + (q.dtype.type(1),) + weights[2:]
    calls.append(Call(specialize(library().attention_weights, *weights), weights))
    calls.append(Call(np.matmul, (s5, v5), {"out": o5}))
    return calls


def _split_heads(x: np.ndarray, kv_heads: int, group: int) -> np.ndarray:
    """``[B, H, S, D]`` as ``[B, kv_heads, group, S, D]`` (splitting an axis: always a view)."""
    return np.reshape(x, (x.shape[0], kv_heads, group) + x.shape[2:], copy=False)


def _row_scratch(step: Step, graph: Graph) -> list[Shape]:
    node = step.node
    return [Shape((int(np.prod(node.shape.dims[node.attrs["axis"]:])),), node.shape.dtype)]


@kernel("layer_norm", "rms_norm", scratch=_row_scratch)
def norm_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    x = b.ins[0]
    program = Program((ScalarOp(LEAF, (0,), node.shape.dtype),), (0,))
    beta = b.ins[2] if len(b.ins) > 2 else None
    call = rows_call(Fusion(program, [x], []), node, b.ins[1], beta, b.scratch[0], b.outs[0])
    return [call] if call is not None else ([] if 0 in x.shape else None)


@kernel("softmax", "log_softmax")
def softmax_step(b: Bound):
    node, x, y = b.node, b.ins[0], b.outs[0]
    if node.shape.dtype not in _FAST:
        return None
    axis = node.attrs["axis"]
    dims = (int(np.prod(x.shape[:axis])), x.shape[axis], int(np.prod(x.shape[axis + 1:])))
    try:
        x3, y3 = np.reshape(x, dims, copy=False), np.reshape(y, dims, copy=False)
    except ValueError:  # x is a view numpy cannot fold into three axes
        return None
    args = (x3, y3, node.kind == "log_softmax")
    return Call(specialize(library().softmax, *args), args)

"""BatchNorm (and any per-channel affine chain of constants) folded into the preceding
conv or matmul.

An inference BatchNorm is imported as ``(y - mean) / sqrt(var + eps) * scale + bias``
with per-channel operands; once those are constants (constant folding turns
``sqrt(var + eps)`` into one) the chain is ``y * s + t`` per output channel. When ``y``
is a ``conv`` whose kernel (and bias) are constants, or a ``matmul`` by a constant
matrix, the chain is folded in: ``conv(x, w * s, b * s + t)``, ``matmul(x, W * s) + t``.

Only constants are folded. Params keep their chains: their values are set after
compiling (import a model with ``initializers="constants"`` to fold its BatchNorms).
Each step of the chain must be used by nothing else, and every operand must vary along
the channel axis only (axis 1 of a conv's output, the last axis of a matmul's).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Ref
from .edit import Match, apply_matches
from .pattern import const_array

__all__ = ["fold_affine"]

_STEPS = ("add", "sub", "mul", "div")


def fold_affine(graph: Graph) -> tuple[Graph, list[str]]:
    dead: set = set()
    return apply_matches(graph, lambda g, node, uses: _find(g, node, uses, dead))


def _find(graph: Graph, node: Node, uses, dead: set) -> Match | None:
    """The chain ending at ``node`` and its anchor, if foldable. ``dead`` collects
    ``(step id, dims)`` of steps whose walk up is known to fail (a step that is not
    ``operand op constant``, or an anchor that is no conv/matmul), so that a chain of n
    steps is walked once, not n times."""
    out = node.outputs[0]
    if node.kind not in _STEPS or not out.dtype.is_float or (node.id, out.dims) in dead:
        return None
    chain, steps, ref = [], {node.id}, Ref(node.id)
    while graph.nodes[ref.node].kind in _STEPS:
        found = _step(graph, graph.nodes[ref.node], out.dims)
        if found is None:
            dead.update((i, out.dims) for i in steps)
            return None
        if chain and uses[ref] != 1:
            return None
        steps.add(ref.node)
        op, operand_first, k, ref = found
        chain.append((op, operand_first, k))
    anchor = graph.nodes[ref.node]
    if uses[ref] != 1 or anchor.outputs[0].dims != out.dims:
        return None
    if anchor.kind == "conv":
        w, b = const_array(graph, anchor.inputs[1]), (const_array(graph, anchor.inputs[2])
                                                      if len(anchor.inputs) > 2 else np.zeros(()))
        axis = 1
    elif anchor.kind == "matmul" and graph.shape_of(anchor.inputs[1]).rank == 2:
        w, b, axis = const_array(graph, anchor.inputs[1]), np.zeros(()), out.rank - 1
        if len(chain) == 1 and chain[0][0] in ("add", "sub"):
            return None  # matmul + constant stays as it is: folding would rebuild the same add
    else:
        dead.update((i, out.dims) for i in steps)
        return None
    if w is None or b is None:
        return None
    s, t = _affine(chain, axis, out.dims)
    if s is None:
        return None
    return Match(node.id, frozenset(steps | {anchor.id}), _emitter(anchor, w, b, s, t, out.dtype),
                 f"{anchor.kind} with {len(chain)} per-channel step(s) folded into its constants")


def _step(graph: Graph, node: Node, dims):
    """``(op, the operand comes first, constant, operand ref)`` for ``operand op constant``."""
    a, b = node.inputs
    for first, (val, const) in ((True, (a, b)), (False, (b, a))):
        k = const_array(graph, const)
        if k is not None and const_array(graph, val) is None and graph.shape_of(val).dims == dims \
                and k.ndim <= len(dims):
            if node.kind == "div" and not first:
                return None  # k / y is not affine in y
            return node.kind, first, k, val
    return None


def _affine(chain, axis: int, dims):
    """``(s, t)`` per channel (1-D, f64) with chain(y) = y * s + t, or (None, None) when
    an operand varies along another axis."""
    channels = dims[axis]
    s, t = np.ones(channels), np.zeros(channels)
    for op, operand_first, k in reversed(chain):  # from the anchor outwards
        per = _per_channel(k, axis, dims)
        if per is None:
            return None, None
        if op == "add":
            t = t + per
        elif op == "sub":
            s, t = (s, t - per) if operand_first else (-s, per - t)
        elif op == "mul":
            s, t = s * per, t * per
        else:
            s, t = s / per, t / per
    return s, t


def _per_channel(k: np.ndarray, axis: int, dims) -> np.ndarray | None:
    full = (1,) * (len(dims) - k.ndim) + k.shape
    if any(d != 1 for i, d in enumerate(full) if i != axis) or full[axis] not in (1, dims[axis]):
        return None
    return np.broadcast_to(k.reshape(-1).astype(np.float64), (dims[axis],))


def _emitter(anchor: Node, w: np.ndarray, b: np.ndarray, s: np.ndarray, t: np.ndarray, dtype):
    def emit(new: Graph, lookup):
        x = lookup(anchor.inputs[0])
        if anchor.kind == "conv":
            scaled = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
            bias = b.astype(np.float64) * s + t
            return [new.add_node("conv", [x, new.constant(scaled.astype(dtype.np)),
                                          new.constant(bias.astype(dtype.np))], dict(anchor.attrs))]
        y = new.matmul(x, new.constant((w.astype(np.float64) * s).astype(dtype.np)))
        return [y if not t.any() else new.add(y, new.constant(t.astype(dtype.np)))]
    return emit

"""Constant folding, common-subexpression and dead-code elimination.

* ``fold_constants``: a node whose inputs are all constants is computed now with the
  reference interpreter (the definition of every op, so the numbers are the ones the
  graph means) and becomes a constant -- unless a result would exceed
  ``FOLD_LIMIT_BYTES``, or grow beyond ``FOLD_GROWTH_BYTES`` while being larger than
  the constants it is computed from (an ``expand`` of a scalar into a large tensor stays
  a cheap runtime op instead of a large constant). Params are never folded: their values
  are set after compiling. Random ops, control flow and custom ops are never folded, nor
  are ops without inputs (``arange``): they cost what a constant costs.
* ``eliminate_common``: two nodes of one kind, with the same inputs and attributes,
  compute the same value; the later one reads the earlier one's (equal constants merge
  too, up to ``CSE_CONSTANT_BYTES`` each). Random ops, control flow and custom ops are
  kept apart.
* ``eliminate_dead``: nodes no output depends on are dropped (inputs and params stay:
  they are the compiled graph's interface).
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..ir.graph import Graph, subgraphs_of
from ..ir.node import Node, Ref
from ..reference.interpreter import RefContext, run_node
from .edit import rewrite
from .rewrite import copy_node

__all__ = ["fold_constants", "eliminate_common", "eliminate_dead", "FOLD_LIMIT_BYTES", "FOLD_GROWTH_BYTES",
           "is_pure"]

FOLD_LIMIT_BYTES = 64 << 20   # no folded constant is larger
FOLD_GROWTH_BYTES = 1 << 20   # ... nor larger than this and than its constant inputs together
CSE_CONSTANT_BYTES = 64 << 10  # larger constants are not compared (hashing weights on every compile)


def is_pure(node: Node) -> bool:
    """Whether ``node`` computes the same result from the same inputs every time (no
    random ops, no control flow whose bodies might hold them, no user kernels)."""
    schema = node.schema
    return schema.group != "random" and not schema.custom and not subgraphs_of(node)


def fold_constants(graph: Graph) -> tuple[Graph, list[str]]:
    if not any(_foldable(graph, n) for n in graph.nodes):
        return graph, []
    notes: list[str] = []
    constant_ids: set[int] = set()  # nodes of the new graph that are constants

    def visit(new: Graph, node: Node, lookup):
        ins = [lookup(r) for r in node.inputs]
        if not node.inputs or not _fits(node, ins) or not all(v.ref.node in constant_ids for v in ins) \
                or not is_pure(node):
            outs = None
        else:
            args = [new.nodes[v.ref.node].attrs["value"] for v in ins]
            outs = [new.constant(np.asarray(a)) for a in run_node(node, args, RefContext(node=node))]
            notes.append(graph.describe(node))
        if outs is None:
            outs = copy_node(new, node, ins)
        constant_ids.update(v.ref.node for v in outs if new.nodes[v.ref.node].kind == "constant")
        return outs

    new = rewrite(graph, visit)
    return (new, [f"folded into constants: {', '.join(notes)}"]) if notes else (graph, [])


def _foldable(graph: Graph, node: Node) -> bool:
    """Cheap pre-check: some node reads only constants (or is a pure source op)."""
    if not node.inputs or not is_pure(node):
        return False
    return all(graph.nodes[r.node].kind == "constant" for r in node.inputs) and _fits(
        node, [graph.value(r) for r in node.inputs])


def _fits(node: Node, ins) -> bool:
    out_bytes = sum(s.size * s.dtype.itemsize for s in node.outputs)
    in_bytes = sum(v.shape.size * v.dtype.itemsize for v in ins)
    return out_bytes <= FOLD_LIMIT_BYTES and (out_bytes <= FOLD_GROWTH_BYTES or out_bytes <= in_bytes)


def eliminate_common(graph: Graph) -> tuple[Graph, list[str]]:
    seen: dict[tuple, Ref] = {}
    same: dict[int, int] = {}  # node id -> the earlier node id computing the same
    for node in graph.nodes:
        if node.kind in ("input", "param") or not is_pure(node) or (
                node.kind == "constant" and node.attrs["value"].nbytes > CSE_CONSTANT_BYTES):
            continue
        key = (node.kind, tuple(Ref(same.get(r.node, r.node), r.index) for r in node.inputs), _attrs_key(node))
        if key in seen:
            same[node.id] = seen[key].node
        else:
            seen[key] = Ref(node.id)
    if not same:
        return graph, []

    def visit(new: Graph, node: Node, lookup):
        if node.id in same:
            return [lookup(Ref(same[node.id], i)) for i in range(len(node.outputs))]
        return None

    notes = [f"{graph.describe(graph.nodes[i])} = %{j}" for i, j in same.items()]
    return rewrite(graph, visit), [f"merged duplicates: {', '.join(notes)}"]


def _attrs_key(node: Node) -> tuple:
    out = []
    for k, v in sorted(node.attrs.items()):
        if isinstance(v, np.ndarray):
            v = (v.dtype.str, v.shape, hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
        elif isinstance(v, float):
            v = repr(v)  # -0.0 and 0.0 differ
        out.append((k, type(v).__name__, v))
    return tuple(out)


def eliminate_dead(graph: Graph) -> tuple[Graph, list[str]]:
    live: set[int] = {r.node for r in graph.outputs}
    for node in reversed(graph.nodes):
        if node.id in live:
            live.update(r.node for r in node.inputs)
    dead = [n for n in graph.nodes if n.id not in live and n.kind not in ("input", "param")]
    if not dead:
        return graph, []
    shown = ", ".join(graph.describe(n) for n in dead[:12]) + (f" and {len(dead) - 12} more" if len(dead) > 12 else "")
    return rewrite(graph, live=live), [f"removed {len(dead)} unused node(s): {shown}"]

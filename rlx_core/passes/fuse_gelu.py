"""GELU written out by exporters, back to the ``gelu`` / ``gelu_tanh`` ops.

* erf form (torch ``F.gelu``): ``0.5 * x * (1 + erf(x / sqrt(2)))`` (or ``x * 0.70710678``);
* tanh form (``approximate="tanh"``, GPT-2's ``gelu_new``):
  ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``, with ``x**3`` as ``pow`` or
  products.

Any nesting and operand order of the products and sums is recognised (see
``pattern.factors``); every constant must be the formula's, in the graph's dtype, and
every intermediate value must have ``x``'s dims (scalar constants only), so the op
computes exactly the function the graph wrote out.
"""
from __future__ import annotations

import math

from ..ir.graph import Graph
from ..ir.node import Node, Ref
from .edit import Match, apply_matches
from .pattern import close_to, factors, terms

__all__ = ["fuse_gelu"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def fuse_gelu(graph: Graph) -> tuple[Graph, list[str]]:
    return apply_matches(graph, _find)


def _find(graph: Graph, node: Node, uses) -> Match | None:
    if node.kind not in ("mul", "div") or not node.outputs[0].dtype.is_float:
        return None
    root = Ref(node.id)
    dims, dtype = node.outputs[0].dims, node.outputs[0].dtype
    _, first, _ = factors(graph, root)
    for inner in first:
        const, parts, _ = terms(graph, inner)
        fn = graph.nodes[parts[0].node] if len(parts) == 1 else None
        if fn is None or fn.kind not in ("erf", "tanh"):
            continue
        for x in _candidates(graph, fn.inputs[0]):  # x may be a product itself: find it under fn
            coef, powers, covers = factors(graph, root, (x,))
            if powers != {x: 1, inner: 1} or not close_to(coef, 0.5, dtype) or graph.shape_of(x).dims != dims:
                continue
            kind = _one_plus(graph, inner, x, dims, covers)
            if kind is not None:
                return Match(node.id, frozenset(covers), lambda new, lookup, x=x, kind=kind: [
                    new.add_node(kind, [lookup(x)])], kind)
    return None


def _candidates(graph: Graph, ref: Ref, depth: int = 3) -> list[Ref]:
    """Non-constant values at most ``depth`` steps under ``ref`` (``ref`` first)."""
    out, level = [], [ref]
    for _ in range(depth + 1):
        nxt = []
        for r in level:
            if r not in out and graph.nodes[r.node].kind != "constant":
                out.append(r)
                nxt.extend(graph.nodes[r.node].inputs)
        level = nxt
    return out


def _one_plus(graph: Graph, ref: Ref, x: Ref, dims, covers: set) -> str | None:
    """``gelu`` / ``gelu_tanh`` when ``ref`` is ``1 + erf(x/sqrt2)`` / ``1 + tanh(...)``."""
    dtype = graph.shape_of(x).dtype
    const, parts, nodes = terms(graph, ref, (x,))
    if not close_to(const, 1.0, dtype) or len(parts) != 1 or graph.shape_of(ref).dims != dims:
        return None
    fn = graph.nodes[parts[0].node]
    if fn.kind not in ("erf", "tanh") or fn.outputs[0].dims != dims:
        return None
    coef, powers, inner_nodes = factors(graph, fn.inputs[0], (x,))
    if fn.kind == "erf":
        ok = powers == {x: 1} and close_to(coef, 1 / math.sqrt(2.0), dtype)
    else:
        ok = close_to(coef, _SQRT_2_OVER_PI, dtype) and len(powers) == 1 and _cubic(graph, next(iter(powers)),
                                                                                    powers, x, dims, inner_nodes)
    if not ok:
        return None
    covers |= nodes | inner_nodes | {fn.id}
    return "gelu" if fn.kind == "erf" else "gelu_tanh"


def _cubic(graph: Graph, ref: Ref, powers, x: Ref, dims, nodes: set) -> bool:
    """``ref`` (with power 1) is ``x + 0.044715 * x**3``."""
    if powers[ref] != 1 or graph.shape_of(ref).dims != dims:
        return False
    const, parts, sum_nodes = terms(graph, ref, (x,))
    if const != 0.0 or len(parts) != 2 or x not in parts:
        return False
    cube = parts[1] if parts[0] == x else parts[0]
    coef, cube_powers, cube_nodes = factors(graph, cube, (x,))
    if cube_powers != {x: 3} or not close_to(coef, 0.044715, graph.shape_of(x).dtype):
        return False
    nodes |= sum_nodes | cube_nodes
    return True

"""Graph editing for the optimisation passes: copy a graph into a new one while
dropping nodes or replacing matched patterns.

Graphs are append-only, so every pass that changes something builds a new graph.
:func:`rewrite` copies node by node (inputs and params always, in their order, so the
compiled graph's names stay the same); a ``visit`` may return replacement values for a
node, built from the new graph's values of any earlier node (``lookup``). A pattern
pass finds :class:`Match` es first -- from the last node backwards, so the largest
pattern around a value wins over the smaller ones inside it -- then emits each at its
root. Nodes a replacement leaves unused are removed by the dead-code pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..ir.graph import Graph
from ..ir.node import Node, Ref, Value
from .fusion import use_counts
from .rewrite import copy_node

__all__ = ["rewrite", "Match", "apply_matches", "Lookup"]

Lookup = Callable[[Ref], Value]
Visit = Callable[[Graph, Node, Lookup], "Sequence[Value] | None"]


def rewrite(graph: Graph, visit: Visit | None = None, live: "set[int] | None" = None) -> Graph:
    """A copy of ``graph`` with only the nodes in ``live`` (default all), where
    ``visit(new, node, lookup)`` may return a node's replacement outputs (None copies it).
    Replacements keep the origin of the node they replace."""
    new = Graph(graph.name)
    mapping: dict[Ref, Value] = {}
    lookup = mapping.__getitem__
    for node in graph.nodes:
        if live is not None and node.id not in live and node.kind not in ("input", "param"):
            continue
        with new.origin(graph.origins.get(node.id)):
            outs = visit(new, node, lookup) if visit is not None else None
            if outs is None:
                outs = _copy(new, graph, node, [mapping[r] for r in node.inputs])
        for i, v in enumerate(outs):
            mapping[Ref(node.id, i)] = v
    new.set_outputs([mapping[r] for r in graph.outputs], names=graph.output_names)
    return new


def _copy(new: Graph, graph: Graph, node: Node, inputs: Sequence[Value]) -> list[Value]:
    """``node`` of ``graph`` appended to ``new`` on ``inputs``. When they have the shapes
    it was built on, the node (immutable, its attributes already checked) is reused as it
    is: no shape rule runs again and no constant's array is copied again, so passes over
    a model with large constants stay cheap. Otherwise it is added anew (re-inferred)."""
    if any(v.shape != graph.shape_of(r) for v, r in zip(inputs, node.inputs)):
        return copy_node(new, node, inputs)
    twin = Node(len(new.nodes), node.kind, tuple(v.ref for v in inputs), node.attrs, node.outputs, node.name)
    if node.kind in ("input", "param"):
        new._names[node.attrs["name"]] = twin.id
    new.nodes.append(twin)
    if new._origin:
        new.origins[twin.id] = new._origin
    return [Value(new, Ref(twin.id, i)) for i in range(len(node.outputs))]


@dataclass
class Match:
    """A pattern found in a graph: ``emit(new, lookup)`` builds the values that replace
    the outputs of node ``root``; ``covers`` are the nodes the pattern reads through
    (no other pattern is rooted there); ``what`` says what it became, for explain()."""

    root: int
    covers: frozenset
    emit: Callable[[Graph, Lookup], Sequence[Value]]
    what: str


Finder = Callable[[Graph, Node, dict], "Match | None"]


def apply_matches(graph: Graph, find: Finder) -> tuple[Graph, list[str]]:
    """Replace every pattern ``find(graph, node, uses)`` reports (``uses``: read counts
    per Ref, see ``use_counts``); returns the new graph (``graph`` itself when nothing
    matched) and one line per replacement."""
    uses = use_counts(graph)
    found: dict[int, Match] = {}
    covered: set[int] = set()
    for node in reversed(graph.nodes):
        if node.id in covered or node.kind in ("input", "param", "constant"):
            continue
        m = find(graph, node, uses)
        if m is not None:
            found[m.root] = m
            covered |= m.covers
    if not found:
        return graph, []
    notes = [f"{found[i].what} <- {len(found[i].covers)} node(s) ending at {graph.describe(graph.nodes[i])}"
             for i in sorted(found)]

    def visit(new: Graph, node: Node, lookup: Lookup):
        m = found.get(node.id)
        return None if m is None else m.emit(new, lookup)

    return rewrite(graph, visit), notes

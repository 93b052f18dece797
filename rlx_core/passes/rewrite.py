"""Rebuild a graph node by node, letting a pass replace any node with new ones."""
from __future__ import annotations

from typing import Callable, Sequence

from ..ir.graph import Graph
from ..ir.node import Node, Ref, Value

__all__ = ["rebuild", "copy_node"]

Visit = Callable[[Graph, Node, list[Value]], "Sequence[Value] | None"]


def copy_node(new: Graph, node: Node, inputs: Sequence[Value], attrs=None) -> list[Value]:
    """Re-add ``node`` to ``new`` on ``inputs`` (shapes re-inferred); returns its outputs."""
    res = new.add_node(node.kind, inputs, dict(node.attrs if attrs is None else attrs), name=node.name)
    return list(res) if isinstance(res, tuple) else [res]


def rebuild(graph: Graph, visit: Visit, finish: Callable[[Graph, list[Value]], list[Value]] | None = None) -> Graph:
    """A new graph where each node is replaced by ``visit(new, node, new_inputs)``'s
    outputs (``None`` copies it unchanged). ``finish`` may rewrite the final outputs."""
    new = Graph(graph.name)
    mapping: dict[Ref, Value] = {}
    for node in graph.nodes:
        ins = [mapping[r] for r in node.inputs]
        with new.origin(graph.origins.get(node.id)):  # replacements keep the node's origin
            outs = visit(new, node, ins)
            if outs is None:
                outs = copy_node(new, node, ins)
        for i, v in enumerate(outs):
            mapping[Ref(node.id, i)] = v
    outs = [mapping[r] for r in graph.outputs]
    if finish is not None:
        outs = finish(new, outs)
    new.set_outputs(outs, names=graph.output_names)
    return new

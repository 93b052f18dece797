"""Whole-graph checks: references, order, names, outputs, and every shape re-inferred."""
from __future__ import annotations

from ..errors import GraphError
from .graph import Graph, subgraphs_of

__all__ = ["verify"]


def verify(graph: Graph, _path: str = "") -> None:
    """Raise GraphError (naming the node) if ``graph`` is malformed in any way."""
    where = f"{_path}graph '{graph.name}'"
    if not graph.outputs:
        raise GraphError(f"{where} has no outputs; call set_outputs")
    names: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        if node.id != i:
            raise GraphError(f"{where}: node at position {i} has id {node.id}")
        for r in node.inputs:
            if not (0 <= r.node < i) or r.index >= len(graph.nodes[r.node].outputs):
                raise GraphError(f"{where}: {node.label} reads {r!r}, which is not an earlier value")
        if node.kind in ("input", "param"):
            key = node.attrs["name"]
            if key in names:
                raise GraphError(f"{where}: name '{key}' is used by %{names[key]} and {node.label}")
            names[key] = i
        schema = node.schema
        attrs = schema.bind_attrs(dict(node.attrs))
        try:
            outs = schema.infer([graph.shape_of(r) for r in node.inputs], attrs)
        except GraphError as e:
            raise type(e)(f"{where}: {node.label}: {e}") from None
        if outs != node.outputs:
            raise GraphError(f"{where}: {node.label} stores {list(node.outputs)} but its rule gives {list(outs)}")
        for sub in subgraphs_of(node):
            verify(sub, f"{_path}{node.label} / ")
    for r in graph.outputs:
        if not (0 <= r.node < len(graph.nodes)) or r.index >= len(graph.nodes[r.node].outputs):
            raise GraphError(f"{where}: output {r!r} does not exist")

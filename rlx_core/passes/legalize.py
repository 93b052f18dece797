"""Legalization: reject, at compile time, every node a backend cannot run.

A node is supported when the backend lists its kind (or a plugin gave it a kernel
for that kind), accepts its dtype, and ``check_node`` has no objection. Subgraphs of
control-flow nodes are checked too. All offending nodes are reported at once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedOpError
from ..ir.graph import Graph, subgraphs_of
from ..ir.node import Node

if TYPE_CHECKING:
    from ..runtime.backend import Backend

__all__ = ["legalize_for_backend", "unsupported_nodes", "node_dtype"]


def node_dtype(graph: Graph, node: Node):
    """The dtype a backend's support table is keyed by: first input's, else output's."""
    return graph.shape_of(node.inputs[0]).dtype if node.inputs else node.outputs[0].dtype


def unsupported_nodes(graph: Graph, backend: "Backend", extra_kinds=(), path: str = "") -> list[tuple[str, str]]:
    """``(node label, reason)`` for every node of ``graph`` (and its subgraphs) that
    ``backend`` cannot run; ``extra_kinds`` are kinds plugins supplied kernels for."""
    table = backend.supported_ops()
    bad = []
    for node in graph.nodes:
        if node.kind in ("input", "param"):  # bound by the runtime, not run as ops
            continue
        label = f"{path}{graph.describe(node)}"
        if node.kind not in table and node.kind not in extra_kinds:
            bad.append((label, f"op kind '{node.kind}' is not supported by backend '{backend.name}'"))
            continue
        dtypes = table.get(node.kind)
        dt = node_dtype(graph, node)
        if dtypes is not None and dt not in dtypes:
            bad.append((label, f"{node.kind} on {dt} is not supported by backend '{backend.name}' "
                               f"(it runs {', '.join(sorted(d.value for d in dtypes))})"))
            continue
        why = backend.check_node(node)
        if why:
            bad.append((label, why))
            continue
        for sub in subgraphs_of(node):
            bad.extend(unsupported_nodes(sub, backend, extra_kinds, path=f"{label} / "))
    return bad


def legalize_for_backend(graph: Graph, backend: "Backend", extra_kinds=()) -> Graph:
    """Return ``graph`` if ``backend`` can run all of it; else raise UnsupportedOpError."""
    bad = unsupported_nodes(graph, backend, extra_kinds)
    if bad:
        raise UnsupportedOpError(backend.name, bad)
    return graph

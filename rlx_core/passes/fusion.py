"""Fusion grouping: the order a graph's nodes run in, with elementwise chains grouped.

:func:`elementwise_steps` is the grouping rlx-wgpu and rlx-rocm compile from: an
elementwise node joins the group of the node that consumes it when that consumer is
elementwise too, the value is used nowhere else (not by another node, not as a graph
output), both have the same dims (so the value is computed exactly once per output
element), and the group stays within ``max_operands`` outside operands (one-element
constants are inlined and do not count). Groups are trees whose root is the last node;
the group runs where its root stood. Every other node is a step of its own; nodes of the
``no_step`` kinds (sources, views) run no step at all. What counts as elementwise is the
backend's call (``is_elementwise``: the kinds and dtypes its fused kernels compute).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.graph import Graph
from ..ir.node import Node, Ref

__all__ = ["Step", "elementwise_steps", "use_counts", "outside_operands", "step_io", "value_lifetimes"]


@dataclass(frozen=True)
class Step:
    nodes: tuple[Node, ...]  # one node, or an elementwise group (root last)
    fused: bool = False      # run as one fused elementwise kernel

    @property
    def root(self) -> Node:
        return self.nodes[-1]


def elementwise_steps(graph: Graph, is_elementwise: Callable[[Node], bool], max_operands: int, *,
                      no_step: frozenset = frozenset(), fuse: bool = True) -> list[Step]:
    """The steps of ``graph`` in run order (see the module docstring). Every node that
    ``is_elementwise`` is a fused step (``fused=True``), alone when ``fuse`` is False."""
    uses = use_counts(graph)
    absorbed: set[int] = set()
    groups: dict[int, list[Node]] = {}
    for node in reversed(graph.nodes):
        if node.id in absorbed or not is_elementwise(node):
            continue
        members = _absorb(graph, node, absorbed, uses, is_elementwise, max_operands) if fuse else [node]
        groups[node.id] = sorted(members, key=lambda n: n.id)
    return [Step(tuple(groups.get(node.id, [node])), node.id in groups) for node in graph.nodes
            if node.kind not in no_step and node.id not in absorbed]


def _absorb(graph: Graph, root: Node, absorbed: set[int], uses: dict, is_elementwise: Callable[[Node], bool],
            max_operands: int) -> list[Node]:
    """The group of ``root``: producers joined depth first, each consumer's inputs in order.
    Iterative (an explicit stack) with the outside operands kept up to date as members
    join, so that chains of any length group in linear time without deep recursion."""
    members, inside = [root], {root.id}
    outside = {r for r in root.inputs}
    operands = sum(_counts(graph, r) for r in outside)
    stack = [iter(root.inputs)]
    while stack:
        ref = next(stack[-1], None)
        if ref is None:
            stack.pop()
            continue
        producer = graph.nodes[ref.node]
        if (producer.id in absorbed or producer.id in inside or uses[ref] != 1 or len(producer.outputs) != 1
                or producer.outputs[0].dims != root.outputs[0].dims or not is_elementwise(producer)):
            continue  # (every member has the root's dims, so this is the consumer's dims test)
        new = {r for r in producer.inputs if r.node not in inside and r not in outside}
        total = operands - _counts(graph, ref) + sum(_counts(graph, r) for r in new)
        if total > max_operands:
            continue
        members.append(producer)
        inside.add(producer.id)
        absorbed.add(producer.id)
        outside.discard(ref)
        outside |= new
        operands = total
        stack.append(iter(producer.inputs))
    return members


def _counts(graph: Graph, ref: Ref) -> int:
    """1 for an outside operand a fused kernel binds, 0 for a one-element constant (inlined)."""
    return 0 if graph.nodes[ref.node].kind == "constant" and graph.shape_of(ref).size == 1 else 1


def outside_operands(graph: Graph, members: list[Node]) -> int:
    """Operands a group of ``members`` reads from outside itself (one-element constants,
    which a kernel inlines, not counted)."""
    inside = {n.id for n in members}
    outside = {r for n in members for r in n.inputs if r.node not in inside}
    return sum(_counts(graph, r) for r in outside)


def use_counts(graph: Graph) -> dict:
    """How many times each value (``Ref``) is read: by nodes, and once more per graph output."""
    counts: dict = {}
    for node in graph.nodes:
        for ref in node.inputs:
            counts[ref] = counts.get(ref, 0) + 1
    for ref in graph.outputs:
        counts[ref] = counts.get(ref, 0) + 1
    return counts


def step_io(nodes) -> tuple[list[Ref], list[Ref]]:
    """``(reads, writes)`` of a step running ``nodes`` (one node, or a group, root last):
    every operand read from outside the group, in order, and every output of the root."""
    inside = {n.id for n in nodes}
    root = nodes[-1]
    return [r for n in nodes for r in n.inputs if r.node not in inside], [Ref(root.id, i) for i in range(len(root.outputs))]


def value_lifetimes(graph: Graph, steps, root: Callable[[Ref], Ref], end: int) -> tuple[dict, dict]:
    """``(first, last)``: the index of the step that first writes each value (-1 for graph
    inputs, which come first, in graph order) and of the last step that reads it, through
    ``root`` (the value a view aliases); graph outputs live until ``end``. ``steps`` have
    ``index``, ``reads`` and ``writes``."""
    first: dict[Ref, int] = {Ref(n.id): -1 for n in graph.input_nodes}
    last: dict[Ref, int] = {}
    for step in steps:
        for ref in step.reads:
            owner = root(ref)
            last[owner] = max(last.get(owner, -1), step.index)
        for ref in step.writes:
            first.setdefault(ref, step.index)
    for ref in graph.outputs:
        last[root(ref)] = end
    return first, last

"""Steps: the order a graph's nodes run in, with elementwise chains fused.

An elementwise node joins the group of the node that consumes it when that consumer is
elementwise too, the value is used nowhere else (no other node, not a graph output),
both have the same dims (so the value is computed once per output element) and the
group stays within ``MAX_OPERANDS`` outside operands. A group is a tree whose root is
its last node; it runs where its root stood. Every other node is a step of its own;
sources (inputs, params, constants, folded aranges) and reshapes run no step at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import Graph, Node

from .codegen.elementwise import ELEMENTWISE_KINDS

__all__ = ["Step", "schedule", "NO_STEP_KINDS", "FOLDED_KINDS", "ALIAS_KINDS", "MAX_OPERANDS"]

FOLDED_KINDS = frozenset({"arange"})  # sources computed at compile time and kept as constants
NO_STEP_KINDS = frozenset({"input", "param", "constant"}) | FOLDED_KINDS
ALIAS_KINDS = frozenset({"reshape"})  # the output is the input's bytes, read with other dims
MAX_OPERANDS = 24


@dataclass(frozen=True)
class Step:
    nodes: tuple[Node, ...]  # one node, or an elementwise group (root last)
    fused: bool = False

    @property
    def root(self) -> Node:
        return self.nodes[-1]


def schedule(graph: Graph, fuse: bool = True) -> list[Step]:
    uses = _use_counts(graph)
    absorbed: set[int] = set()
    groups: dict[int, list[Node]] = {}
    for node in reversed(graph.nodes):
        if node.id in absorbed or node.kind not in ELEMENTWISE_KINDS:
            continue
        members = [node]
        if fuse:
            _absorb(graph, node, members, absorbed, uses)
        groups[node.id] = sorted(members, key=lambda n: n.id)
    steps = []
    for node in graph.nodes:
        if node.kind in NO_STEP_KINDS or node.kind in ALIAS_KINDS or node.id in absorbed:
            continue
        steps.append(Step(tuple(groups.get(node.id, [node])), node.id in groups))
    return steps


def _absorb(graph: Graph, consumer: Node, members: list[Node], absorbed: set[int], uses) -> None:
    for ref in consumer.inputs:
        producer = graph.nodes[ref.node]
        if (producer.id in absorbed or uses[ref] != 1 or len(producer.outputs) != 1
                or producer.outputs[0].dims != consumer.outputs[0].dims or producer.kind not in ELEMENTWISE_KINDS):
            continue
        if _operand_count(graph, members + [producer]) > MAX_OPERANDS:
            continue
        members.append(producer)
        absorbed.add(producer.id)
        _absorb(graph, producer, members, absorbed, uses)


def _operand_count(graph: Graph, members: list[Node]) -> int:
    inside = {n.id for n in members}
    outside = {r for n in members for r in n.inputs if r.node not in inside}
    return sum(1 for r in outside if not (graph.nodes[r.node].kind == "constant" and graph.shape_of(r).size == 1))


def _use_counts(graph: Graph) -> dict:
    counts: dict = {}
    for node in graph.nodes:
        for ref in node.inputs:
            counts[ref] = counts.get(ref, 0) + 1
    for ref in graph.outputs:
        counts[ref] = counts.get(ref, 0) + 1
    return counts

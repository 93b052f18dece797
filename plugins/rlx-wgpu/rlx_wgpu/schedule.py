"""Steps: the order in which a graph's nodes run, with elementwise chains fused.

An elementwise node joins the group of the node that consumes it when that consumer is
elementwise too, the value is used nowhere else (not by another node, not as a graph
output), both have the same dims (so the value is computed exactly once per output
element), and the group still fits the device's storage-binding limit. Groups are trees
whose root is the last node; the group runs where its root stood. Everything else is a
step of its own; sources (inputs, params, constants, folded aranges) and reshapes run no
step at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import Graph, Node

from .codegen.elementwise import ELEMENTWISE_KINDS, operand_dtype, supports

__all__ = ["Step", "schedule", "NO_STEP_KINDS", "FOLDED_KINDS", "ALIAS_KINDS"]

FOLDED_KINDS = frozenset({"arange"})  # sources computed at compile time and kept as constants
NO_STEP_KINDS = frozenset({"input", "param", "constant"}) | FOLDED_KINDS
ALIAS_KINDS = frozenset({"reshape"})  # the output is the input's bytes, read with other dims


@dataclass(frozen=True)
class Step:
    nodes: tuple[Node, ...]  # one node, or an elementwise group (root last)
    fused: bool = False      # run as one fused elementwise kernel

    @property
    def root(self) -> Node:
        return self.nodes[-1]


def fusable(graph: Graph, node: Node, unfused: frozenset = frozenset()) -> bool:
    """Whether ``node`` is elementwise on dtypes the fused kernels compute (and not one of
    the node ids in ``unfused``, which run as steps of their own)."""
    return node.id not in unfused and node.kind in ELEMENTWISE_KINDS and \
        supports(node.kind, operand_dtype(graph, node), node.outputs[0].dtype)


def schedule(graph: Graph, max_bindings: int, unfused: frozenset = frozenset()) -> list[Step]:
    """The steps of ``graph`` in run order (see the module docstring); nodes whose ids are
    in ``unfused`` never join a fused group."""
    uses = _use_counts(graph)
    absorbed: set[int] = set()
    groups: dict[int, list[Node]] = {}
    for node in reversed(graph.nodes):
        if node.id in absorbed or not fusable(graph, node, unfused):
            continue
        members = [node]
        _absorb(graph, node, members, absorbed, uses, max_bindings, unfused)
        groups[node.id] = sorted(members, key=lambda n: n.id)
    steps = []
    for node in graph.nodes:
        if node.kind in NO_STEP_KINDS or node.kind in ALIAS_KINDS or node.id in absorbed:
            continue
        steps.append(Step(tuple(groups.get(node.id, [node])), node.id in groups))
    return steps


def _absorb(graph: Graph, consumer: Node, members: list[Node], absorbed: set[int], uses, max_bindings,
            unfused: frozenset) -> None:
    for ref in consumer.inputs:
        producer = graph.nodes[ref.node]
        if (producer.id in absorbed or uses[ref] != 1 or len(producer.outputs) != 1
                or producer.outputs[0].dims != consumer.outputs[0].dims or not fusable(graph, producer, unfused)):
            continue
        if _operand_count(graph, members + [producer]) > max_bindings - 1:
            continue
        members.append(producer)
        absorbed.add(producer.id)
        _absorb(graph, producer, members, absorbed, uses, max_bindings, unfused)


def _operand_count(graph: Graph, members: list[Node]) -> int:
    """Bindings a group needs for its outside operands (one-element constants are inlined)."""
    inside = {n.id for n in members}
    outside = {r for n in members for r in n.inputs if r.node not in inside}
    return sum(1 for r in outside
               if not (graph.nodes[r.node].kind == "constant" and graph.shape_of(r).size == 1))


def _use_counts(graph: Graph) -> dict:
    counts: dict = {}
    for node in graph.nodes:
        for ref in node.inputs:
            counts[ref] = counts.get(ref, 0) + 1
    for ref in graph.outputs:
        counts[ref] = counts.get(ref, 0) + 1
    return counts

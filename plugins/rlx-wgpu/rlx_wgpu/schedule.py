"""Steps: the order in which a graph's nodes run, with elementwise chains fused.

An elementwise node joins the group of the node that consumes it when that consumer is
elementwise too, the value is used nowhere else (not by another node, not as a graph
output), both have the same dims (so the value is computed exactly once per output
element), and the group still fits the device's storage-binding limit. Groups are trees
whose root is the last node; the group runs where its root stood. Everything else is a
step of its own; sources (inputs, params, constants, folded aranges) and reshapes run no
step at all. The grouping is ``rlx_core.passes.fusion.elementwise_steps``.
"""
from __future__ import annotations

from rlx_core.ir import Graph, Node
from rlx_core.passes.fusion import Step, elementwise_steps

from .codegen.elementwise import ELEMENTWISE_KINDS, operand_dtype, supports

__all__ = ["Step", "schedule", "NO_STEP_KINDS", "FOLDED_KINDS", "ALIAS_KINDS"]

FOLDED_KINDS = frozenset({"arange"})  # sources computed at compile time and kept as constants
NO_STEP_KINDS = frozenset({"input", "param", "constant"}) | FOLDED_KINDS
ALIAS_KINDS = frozenset({"reshape"})  # the output is the input's bytes, read with other dims


def fusable(graph: Graph, node: Node, unfused: frozenset = frozenset()) -> bool:
    """Whether ``node`` is elementwise on dtypes the fused kernels compute (and not one of
    the node ids in ``unfused``, which run as steps of their own)."""
    return node.id not in unfused and node.kind in ELEMENTWISE_KINDS and \
        supports(node.kind, operand_dtype(graph, node), node.outputs[0].dtype)


def schedule(graph: Graph, max_bindings: int, unfused: frozenset = frozenset()) -> list[Step]:
    """The steps of ``graph`` in run order (see the module docstring); nodes whose ids are
    in ``unfused`` never join a fused group. A group's outside operands and its output fit
    ``max_bindings``."""
    return elementwise_steps(graph, lambda node: fusable(graph, node, unfused), max_bindings - 1,
                             no_step=NO_STEP_KINDS | ALIAS_KINDS)

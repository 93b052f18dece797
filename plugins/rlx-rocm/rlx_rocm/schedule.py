"""Steps: the order a graph's nodes run in, with elementwise chains fused.

An elementwise node joins the group of the node that consumes it when that consumer is
elementwise too, the value is used nowhere else (no other node, not a graph output),
both have the same dims (so the value is computed once per output element) and the
group stays within ``MAX_OPERANDS`` outside operands. A group is a tree whose root is
its last node; it runs where its root stood. Every other node is a step of its own;
sources (inputs, params, constants, folded aranges) and reshapes run no step at all.
The grouping is ``rlx_core.passes.fusion.elementwise_steps``.
"""
from __future__ import annotations

from rlx_core.ir import Graph
from rlx_core.passes.fusion import Step, elementwise_steps

from .codegen.elementwise import ELEMENTWISE_KINDS

__all__ = ["Step", "schedule", "NO_STEP_KINDS", "FOLDED_KINDS", "ALIAS_KINDS", "MAX_OPERANDS"]

FOLDED_KINDS = frozenset({"arange"})  # sources computed at compile time and kept as constants
NO_STEP_KINDS = frozenset({"input", "param", "constant"}) | FOLDED_KINDS
ALIAS_KINDS = frozenset({"reshape"})  # the output is the input's bytes, read with other dims
MAX_OPERANDS = 24


def schedule(graph: Graph, fuse: bool = True) -> list[Step]:
    """The steps of ``graph`` in run order (``rlx_core.passes.fusion.elementwise_steps``);
    with ``fuse`` False every elementwise node is a group of its own."""
    return elementwise_steps(graph, lambda node: node.kind in ELEMENTWISE_KINDS, MAX_OPERANDS,
                             no_step=NO_STEP_KINDS | ALIAS_KINDS, fuse=fuse)

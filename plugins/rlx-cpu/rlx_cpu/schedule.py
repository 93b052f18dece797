"""The schedule: a graph's nodes grouped into steps, each run by one builder.

Most nodes are a step of their own. Fusion merges nodes into one ``fused`` step:

* **elementwise groups** -- connected elementwise nodes (unary, binary, compare,
  ``where``, ``cast``) become one generated numba kernel that loops over the group's
  *domain* (its largest shape; inputs broadcast to it). Group values used elsewhere
  are stored too, so they must have the domain's shape; a smaller producer (a cast of
  a mask, a scalar expression) joins only when nothing outside the group reads it,
  and is then recomputed for every element of the domain;
* an **anchor** -- a ``matmul`` or ``conv`` whose result only the group reads -- runs
  first and writes into the step's output buffer, which the group then updates in
  place (matmul + bias + activation, conv + relu, matmul + bias + residual add);
* a **norm** -- a ``layer_norm`` / ``rms_norm`` reading a group value of the domain's
  shape -- normalizes the group's result row by row as it is computed (residual add +
  layer norm in one pass).

Merges never create a cycle between steps: two units merge only if no path leads from
one to the other through a third. Steps come out in a topological order that follows
the graph's node order where it can.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from rlx_core import DType, Graph, Node, Ref
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

from .jit.codegen import ScalarOp, supports

__all__ = ["Step", "FUSED", "ELEMENTWISE", "schedule", "scalar_op", "domain_of"]

FUSED = "fused"
SOURCE_KINDS = ("input", "param", "constant")
ELEMENTWISE = frozenset(UNARY) | frozenset(BINARY) | frozenset(COMPARE) | {"where", "cast"}
ANCHOR_KINDS = ("matmul", "conv")
NORM_KINDS = ("layer_norm", "rms_norm")
FUSED_FLOATS = frozenset({DType.F32, DType.F64})  # dtypes anchors and norms fuse on


@dataclass
class Step:
    """One entry of the schedule: the builder ``kind`` computing ``nodes``.

    ``inputs`` are the values it reads that other steps (or the caller) produce;
    ``outputs`` the values it writes that something outside it needs. A ``fused`` step
    runs its ``anchor`` (if any), its elementwise nodes, then its ``norm`` (if any).
    """

    kind: str
    nodes: tuple[Node, ...]
    inputs: tuple[Ref, ...]
    outputs: tuple[Ref, ...]
    anchor: Node | None = None
    norm: Node | None = None
    elementwise: tuple[Node, ...] = field(default=())

    @property
    def node(self) -> Node:
        """The node of a single-node step."""
        return self.nodes[0]

    @property
    def domain(self) -> tuple[int, ...]:
        """The dims a fused step's elementwise kernel loops over."""
        return domain_of(self.elementwise)

    @property
    def label(self) -> str:
        if len(self.nodes) == 1:
            return self.nodes[0].label
        return f"fused[{', '.join(n.label for n in self.nodes)}]"


def domain_of(nodes: Iterable[Node]) -> tuple[int, ...]:
    """The broadcast of the nodes' dims: the shape an elementwise group loops over."""
    return domain_of_dims(*(n.shape.dims for n in nodes))


def domain_of_dims(*dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*dims))


def scalar_op(graph: Graph, node: Node, args: tuple[int, ...]) -> ScalarOp:
    """The codegen op of an elementwise node whose operands are the ops ``args``."""
    attrs = tuple(sorted((k, v.value if hasattr(v, "value") else v) for k, v in node.attrs.items()))
    return ScalarOp(node.kind, args, node.shape.dtype, attrs)


def _fusible(graph: Graph, node: Node) -> bool:
    """An elementwise node the generated kernels can compute."""
    if node.kind not in ELEMENTWISE:
        return False
    in_dtypes = [graph.shape_of(r).dtype for r in node.inputs]
    return supports(scalar_op(graph, node, tuple(range(len(node.inputs)))), in_dtypes)


class _Units:
    """A partition of the compute nodes into units (future steps), merged greedily."""

    def __init__(self, graph: Graph, nodes: list[Node]):
        self.graph = graph
        self.unit_of: dict[int, int] = {n.id: n.id for n in nodes}
        self.members: dict[int, list[Node]] = {n.id: [n] for n in nodes}
        self.consumers: dict[int, set[int]] = {n.id: set() for n in nodes}
        for n in nodes:
            for r in n.inputs:
                if r.node in self.consumers:
                    self.consumers[r.node].add(n.id)

    def domain(self, unit: int) -> tuple[int, ...]:
        return domain_of(self.members[unit])

    def read_only_by(self, unit: int, reader: int, outputs: set[Ref]) -> bool:
        """Are ``unit``'s values read by ``reader`` (or itself) only, none a graph output?"""
        return all(Ref(n.id) not in outputs and all(self.unit_of[c] in (unit, reader) for c in self.consumers[n.id])
                   for n in self.members[unit])

    def successors(self, unit: int) -> set[int]:
        return {self.unit_of[c] for n in self.members[unit] for c in self.consumers[n.id]} - {unit}

    def merge(self, a: int, b: int) -> int | None:
        """Merge units ``a`` and ``b`` (``a`` feeds ``b``) unless that makes a cycle."""
        if a == b:
            return a
        if self._reaches_indirectly(a, b) or self._reaches_indirectly(b, a):
            return None
        self.members[a].extend(self.members.pop(b))
        self.members[a].sort(key=lambda n: n.id)
        for n in self.members[a]:
            self.unit_of[n.id] = a
        return a

    def _reaches_indirectly(self, a: int, b: int) -> bool:
        """Is there a path from ``a`` to ``b`` through some other unit?"""
        todo = [u for u in self.successors(a) if u != b]
        seen = set(todo)
        while todo:
            u = todo.pop()
            for v in self.successors(u):
                if v == b:
                    return True
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return False


def schedule(graph: Graph, overridden: Iterable[str] = (), fuse: bool = True) -> list[Step]:
    """Group ``graph``'s compute nodes into steps (see the module docstring).

    ``overridden`` kinds have plugin-provided kernels: they never fuse. With ``fuse``
    False every node is a step of its own.
    """
    overridden = frozenset(overridden)
    nodes = [n for n in graph.nodes if n.kind not in SOURCE_KINDS]
    units = _Units(graph, nodes)
    fusible = {n.id for n in nodes if n.kind not in overridden and _fusible(graph, n)}
    anchor_of: dict[int, Node] = {}
    norm_of: dict[int, Node] = {}

    outputs = set(graph.outputs)
    for n in nodes:  # elementwise groups: join producers of the same domain, or smaller private ones
        if n.id not in fusible or not fuse:
            continue
        for r in n.inputs:
            p = graph.nodes[r.node]
            if p.id not in fusible:
                continue
            producer, consumer = units.unit_of[p.id], units.unit_of[n.id]
            smaller = domain_of_dims(units.domain(producer), units.domain(consumer)) == units.domain(consumer)
            if units.domain(producer) == units.domain(consumer) or \
                    (smaller and units.read_only_by(producer, consumer, outputs)):
                units.merge(producer, consumer)
    groups = {units.unit_of[i] for i in fusible}

    for unit in sorted(groups) if fuse else ():
        anchor = _anchor_candidate(graph, units, unit, outputs, overridden)
        if anchor is not None and units.merge(unit, units.unit_of[anchor.id]) is not None:
            anchor_of[unit] = anchor
    for m in nodes if fuse else ():
        if m.kind in NORM_KINDS and m.kind not in overridden and m.shape.dtype in FUSED_FLOATS:
            producer = units.unit_of.get(m.inputs[0].node)
            if producer in groups and producer not in norm_of and \
                    graph.shape_of(m.inputs[0]).dims == units.domain(producer):
                if units.merge(producer, units.unit_of[m.id]) is not None:
                    norm_of[producer] = m

    return [_step(graph, units, u, fusible, anchor_of.get(u), norm_of.get(u), outputs)
            for u in _topological(units)]


def _anchor_candidate(graph: Graph, units: _Units, unit: int, outputs: set[Ref], overridden) -> Node | None:
    """A matmul / conv feeding only this group, with the group's domain and a float dtype."""
    members = {n.id for n in units.members[unit]}
    domain = units.domain(unit)
    for n in units.members[unit]:
        for r in n.inputs:
            a = graph.nodes[r.node]
            if a.kind not in ANCHOR_KINDS or a.kind in overridden or units.unit_of.get(a.id) != a.id \
                    or len(units.members[a.id]) != 1:
                continue
            if a.shape.dims == domain and a.shape.dtype in FUSED_FLOATS and Ref(a.id) not in outputs \
                    and units.consumers[a.id] <= members:
                return a
    return None


def _topological(units: _Units) -> list[int]:
    """Units in dependency order; among ready units, the one with the earliest node first."""
    preds = {u: 0 for u in units.members}
    for u in units.members:
        for v in units.successors(u):
            preds[v] += 1
    ready = [(units.members[u][0].id, u) for u, k in preds.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in units.successors(u):
            preds[v] -= 1
            if preds[v] == 0:
                heapq.heappush(ready, (units.members[v][0].id, v))
    if len(order) != len(units.members):
        raise AssertionError("the fusion partition has a cycle")
    return order


def _step(graph: Graph, units: _Units, unit: int, fusible: set[int], anchor: Node | None, norm: Node | None,
          outputs: set[Ref]) -> Step:
    members = units.members[unit]
    ids = {n.id for n in members}
    inputs, seen = [], set()
    for n in members:
        for r in n.inputs:
            if r.node not in ids and r not in seen:
                seen.add(r)
                inputs.append(r)
    elementwise = tuple(n for n in members if n.id in fusible)
    if not elementwise:  # a single node: it reads its inputs in order and writes all its outputs
        node = members[0]
        return Step(node.kind, (node,), node.inputs, tuple(Ref(node.id, i) for i in range(len(node.outputs))))
    written = [Ref(n.id) for n in members if n is not anchor and n is not norm and
               (Ref(n.id) in outputs or any(c not in ids for c in units.consumers[n.id]))]
    if norm is not None:  # the norm's output is the step's last output
        written.append(Ref(norm.id))
    elif not written:  # nothing reads the group: still compute its last value
        written.append(Ref(elementwise[-1].id))
    return Step(FUSED, tuple(members), tuple(inputs), tuple(written), anchor, norm, elementwise)

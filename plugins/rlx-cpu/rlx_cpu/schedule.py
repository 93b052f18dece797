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

A group holds at most ``MAX_GROUP_NODES`` elementwise nodes; a longer run of them
becomes several kernels. Longer kernels gain nothing: numba compiles one (of adds,
muls, maxes and tanhs) in about 0.2 s plus 15-20 ms per op from 64 to 256 ops, but
21 ms/op at 512 and 49 at 1024 (a chain of 10000 ops took minutes); and at run time
LLVM optimizes long loop bodies worse -- 512 chained f32 adds and muls over 2^20
elements took 45 ms as one kernel, 18 ms as 8 kernels of 64 (one more load and store
per element per kernel is cheap).

Merges never create a cycle between steps: two units merge only if no path leads from
one to the other through a third. Steps come out in a topological order that follows
the graph's node order where it can. Scheduling takes O(n log n) on chains and typical
networks (see ``_Units``).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from rlx_core import DType, Graph, Node, Ref
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

from .jit.codegen import ScalarOp, supports

__all__ = ["Step", "FUSED", "ELEMENTWISE", "MAX_GROUP_NODES", "schedule", "scalar_op", "domain_of"]

FUSED = "fused"
SOURCE_KINDS = ("input", "param", "constant")
ELEMENTWISE = frozenset(UNARY) | frozenset(BINARY) | frozenset(COMPARE) | {"where", "cast"}
ANCHOR_KINDS = ("matmul", "conv")
NORM_KINDS = ("layer_norm", "rms_norm")
FUSED_FLOATS = frozenset({DType.F32, DType.F64})  # dtypes anchors and norms fuse on
MAX_GROUP_NODES = 64  # elementwise nodes in one fused kernel (see the module docstring)


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


@dataclass
class _Unit:
    """One unit's members and what the merges need of it, kept up to date by ``merge``."""

    members: list[Node]  # in no particular order (sorted where the order matters)
    consumers: set[int]  # ids of nodes outside the unit that read a member
    producers: set[int]  # ids of compute nodes outside the unit that a member reads
    domain: tuple[int, ...]
    first: int  # the smallest member id
    fused: int  # members that are elementwise (fusible) nodes
    outputs: int  # members whose value is a graph output


class _Units:
    """A partition of the compute nodes into units (future steps), merged greedily.

    A merge costs about the smaller unit's size, never the larger's: the smaller unit's
    nodes are relabelled, its member list and neighbour sets poured into the larger's.
    Merging a chain of n nodes one by one is O(n log n) (it was O(n^2): every merge
    sorted, relabelled and walked the whole group)."""

    def __init__(self, nodes: list[Node], fusible: set[int], outputs: set[Ref]):
        self.consumers: dict[int, set[int]] = {n.id: set() for n in nodes}  # node -> the nodes reading it
        for n in nodes:
            for r in n.inputs:
                if r.node in self.consumers:
                    self.consumers[r.node].add(n.id)
        self._key: dict[int, int] = {n.id: n.id for n in nodes}  # node -> its unit's key
        self._name: dict[int, int] = {n.id: n.id for n in nodes}  # key -> the unit's name (its id for callers)
        self._units: dict[int, _Unit] = {  # by name
            n.id: _Unit([n], set(self.consumers[n.id]), {r.node for r in n.inputs if r.node in self.consumers},
                        n.shape.dims, n.id, int(n.id in fusible), int(Ref(n.id) in outputs)) for n in nodes}

    def __iter__(self):
        return iter(self._units)

    def __len__(self) -> int:
        return len(self._units)

    def unit(self, node: int) -> int | None:
        """The unit holding node ``node`` (None: a source node, in no unit)."""
        key = self._key.get(node)
        return None if key is None else self._name[key]

    def members(self, unit: int) -> list[Node]:
        """``unit``'s nodes in graph order."""
        return sorted(self._units[unit].members, key=lambda n: n.id)

    def size(self, unit: int) -> int:
        return len(self._units[unit].members)

    def first(self, unit: int) -> int:
        return self._units[unit].first

    def fused(self, unit: int) -> int:
        return self._units[unit].fused

    def domain(self, unit: int) -> tuple[int, ...]:
        return self._units[unit].domain

    def read_only_by(self, unit: int, reader: int) -> bool:
        """Are ``unit``'s values read by ``reader`` (or itself) only, none a graph output?"""
        u = self._units[unit]
        return not u.outputs and all(self.unit(c) == reader for c in u.consumers)

    def successors(self, unit: int) -> set[int]:
        return {self.unit(c) for c in self._units[unit].consumers}

    def predecessors(self, unit: int) -> set[int]:
        return {self.unit(p) for p in self._units[unit].producers}

    def merge(self, producer: int, consumer: int, keep: int | None = None, limit: int | None = None) -> int | None:
        """Merge unit ``producer`` with ``consumer``, which reads it, unless that makes a
        cycle; the merged unit is named ``keep`` (default: ``producer``). ``limit``: see
        ``_reaches_indirectly``."""
        if producer == consumer:
            return producer
        if self._reaches_indirectly(producer, consumer, limit):
            return None
        a, b = self._units.pop(producer), self._units.pop(consumer)
        big, small = (a, b) if len(a.members) >= len(b.members) else (b, a)
        keys = (self._key[a.members[0].id], self._key[b.members[0].id])
        big_key = self._key[big.members[0].id]
        big.consumers.update(c for c in small.consumers if self._key[c] not in keys)
        big.producers.update(p for p in small.producers if self._key[p] not in keys)
        for n in small.members:
            big.consumers.discard(n.id)
            big.producers.discard(n.id)
            self._key[n.id] = big_key
        for key in keys:
            self._name.pop(key)
        big.members += small.members
        big.domain = domain_of_dims(big.domain, small.domain)
        big.first = min(big.first, small.first)
        big.fused += small.fused
        big.outputs += small.outputs
        name = producer if keep is None else keep
        self._name[big_key] = name
        self._units[name] = big
        return name

    def _reaches_indirectly(self, a: int, b: int, limit: int | None) -> bool:
        """Is there a path from ``a`` to ``b`` through some other unit?

        Searched from both ends in turn (forward from ``a``'s successors, backward from
        ``b``'s predecessors) until the two meet or one side runs out, so the cost is
        about the smaller of what lies after ``a`` and before ``b`` (a norm whose gamma
        is a param: nothing before it). ``limit``: a node id such that every unit whose
        first node comes after it is a single node -- such a unit only reaches nodes
        after ``limit``, so the forward search skips it when ``b`` holds none."""
        forward = [u for u in self.successors(a) if u != b and (limit is None or self.first(u) <= limit)]
        backward = [u for u in self.predecessors(b) if u != a]
        seen_forward, seen_backward = set(forward), set(backward)
        if seen_forward & seen_backward:
            return True
        while forward and backward:
            for v in self.successors(forward.pop()):
                if v == b or v in seen_backward:
                    return True
                if v not in seen_forward and (limit is None or self.first(v) <= limit):
                    seen_forward.add(v)
                    forward.append(v)
            for v in self.predecessors(backward.pop()):
                if v == a or v in seen_forward:
                    return True
                if v not in seen_backward:
                    seen_backward.add(v)
                    backward.append(v)
        return False


def schedule(graph: Graph, overridden: Iterable[str] = (), fuse: bool = True) -> list[Step]:
    """Group ``graph``'s compute nodes into steps (see the module docstring).

    ``overridden`` kinds have plugin-provided kernels: they never fuse. With ``fuse``
    False every node is a step of its own.
    """
    overridden = frozenset(overridden)
    nodes = [n for n in graph.nodes if n.kind not in SOURCE_KINDS]
    fusible = {n.id for n in nodes if n.kind not in overridden and _fusible(graph, n)}
    outputs = set(graph.outputs)
    units = _Units(nodes, fusible, outputs)
    anchor_of: dict[int, Node] = {}
    norm_of: dict[int, Node] = {}

    # Elementwise groups: join producers of the same domain, or smaller private ones.
    # Nodes are taken in graph order, so every node after ``n`` is still a unit of its
    # own: the cycle check's forward search stops at ``n`` (``limit``).
    for n in nodes if fuse else ():
        if n.id not in fusible:
            continue
        for r in n.inputs:
            if r.node not in fusible:
                continue
            producer, consumer = units.unit(r.node), units.unit(n.id)
            if producer == consumer or units.fused(producer) + units.fused(consumer) > MAX_GROUP_NODES:
                continue
            domain = units.domain(consumer)
            if units.domain(producer) == domain or (domain_of_dims(units.domain(producer), domain) == domain
                                                    and units.read_only_by(producer, consumer)):
                units.merge(producer, consumer, limit=n.id)
    groups = {units.unit(i) for i in fusible}

    for unit in sorted(groups) if fuse else ():
        anchor = _anchor_candidate(graph, units, unit, outputs, overridden)
        if anchor is not None and units.merge(anchor.id, unit, keep=unit) is not None:
            anchor_of[unit] = anchor
    for m in nodes if fuse else ():
        if m.kind in NORM_KINDS and m.kind not in overridden and m.shape.dtype in FUSED_FLOATS:
            producer = units.unit(m.inputs[0].node)
            if producer in groups and producer not in norm_of and \
                    graph.shape_of(m.inputs[0]).dims == units.domain(producer):
                if units.merge(producer, units.unit(m.id)) is not None:
                    norm_of[producer] = m

    return [_step(graph, units, u, fusible, anchor_of.get(u), norm_of.get(u), outputs)
            for u in _topological(units)]


def _anchor_candidate(graph: Graph, units: _Units, unit: int, outputs: set[Ref], overridden) -> Node | None:
    """A matmul / conv feeding only this group, with the group's domain and a float dtype."""
    members = units.members(unit)
    ids = {n.id for n in members}
    domain = units.domain(unit)
    for n in members:
        for r in n.inputs:
            a = graph.nodes[r.node]
            if a.kind not in ANCHOR_KINDS or a.kind in overridden or units.unit(a.id) != a.id \
                    or units.size(a.id) != 1:
                continue
            if a.shape.dims == domain and a.shape.dtype in FUSED_FLOATS and Ref(a.id) not in outputs \
                    and units.consumers[a.id] <= ids:
                return a
    return None


def _topological(units: _Units) -> list[int]:
    """Units in dependency order; among ready units, the one with the earliest node first."""
    successors = {u: units.successors(u) for u in units}
    preds = {u: 0 for u in units}
    for u in units:
        for v in successors[u]:
            preds[v] += 1
    ready = [(units.first(u), u) for u, k in preds.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in successors[u]:
            preds[v] -= 1
            if preds[v] == 0:
                heapq.heappush(ready, (units.first(v), v))
    if len(order) != len(units):
        raise AssertionError("the fusion partition has a cycle")
    return order


def _step(graph: Graph, units: _Units, unit: int, fusible: set[int], anchor: Node | None, norm: Node | None,
          outputs: set[Ref]) -> Step:
    members = units.members(unit)
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

"""Memory planning: every intermediate value gets a fixed slice of one arena.

Values whose lifetimes do not overlap share bytes. Lifetimes are step intervals
``[defined, last used]``; graph outputs live to the end. Placement is greedy by size
(largest first, each at the lowest aligned offset that does not collide with an
already placed value whose lifetime overlaps), which is near-optimal for the chains
and diamonds that neural networks are made of.

Values that need no arena bytes: params and constants (persistent buffers of their
own) and *aliases* -- outputs of ops that are views of an input (reshape of a
contiguous value), which extend the lifetime of the value they view instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import Graph, Ref

__all__ = ["Placement", "MemoryPlan", "plan_memory", "ALIAS_KINDS"]

# Kinds whose output may share its input's bytes: same elements, same order.
ALIAS_KINDS = frozenset({"reshape"})


@dataclass(frozen=True)
class Placement:
    offset: int
    nbytes: int
    first: int  # step that defines the value (-1: before the first step, i.e. an input)
    last: int   # last step that reads it (len(steps): a graph output)


@dataclass
class MemoryPlan:
    placements: dict[Ref, Placement]
    aliases: dict[Ref, Ref]  # value -> the value whose bytes it views
    size: int
    alignment: int

    def root(self, ref: Ref) -> Ref:
        while ref in self.aliases:
            ref = self.aliases[ref]
        return ref


def plan_memory(graph: Graph, order: list[int], alignment: int = 64) -> MemoryPlan:
    """Plan the arena for running ``graph``'s nodes in ``order`` (node ids)."""
    step_of = {nid: i for i, nid in enumerate(order)}
    aliases: dict[Ref, Ref] = {}
    first: dict[Ref, int] = {}
    last: dict[Ref, int] = {}
    persistent = {n.id for n in graph.nodes if n.kind in ("param", "constant")}

    def root(r: Ref) -> Ref:
        while r in aliases:
            r = aliases[r]
        return r

    for node in graph.nodes:
        if node.kind == "input":
            first[Ref(node.id)] = -1
    for nid in order:
        node = graph.nodes[nid]
        step = step_of[nid]
        for r in node.inputs:
            base = root(r)
            last[base] = max(last.get(base, -1), step)
        if node.kind in ALIAS_KINDS and root(node.inputs[0]).node not in persistent:
            aliases[Ref(nid)] = node.inputs[0]
            continue
        for i in range(len(node.outputs)):
            first[Ref(nid, i)] = step
    end = len(order)
    for r in graph.outputs:
        base = root(r)
        if base.node not in persistent:
            last[base] = end

    sized = []
    for ref, start in first.items():
        nbytes = graph.shape_of(ref).nbytes
        sized.append((ref, start, last.get(ref, start), nbytes))
    sized.sort(key=lambda t: (-t[3], t[1], t[0]))

    placed: list[tuple[int, int, int, int]] = []  # (offset, end_offset, first, last)
    placements: dict[Ref, Placement] = {}
    for ref, start, stop, nbytes in sized:
        size = _round_up(max(nbytes, 1), alignment)
        offset = 0
        for off, off_end, f, l in sorted(p for p in placed if not (p[3] < start or stop < p[2])):
            if offset + size <= off:
                break
            offset = max(offset, off_end)
        placed.append((offset, offset + size, start, stop))
        placements[ref] = Placement(offset, nbytes, start, stop)
    total = max((p[1] for p in placed), default=0)
    return MemoryPlan(placements, aliases, total, alignment)


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a

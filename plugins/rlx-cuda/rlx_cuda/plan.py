"""Device memory planning: every value a run produces gets a fixed slice of one arena.

Lifetimes are step intervals ``[written, last read]`` (graph inputs are written before
the first step, graph outputs live to the end); a step's scratch lives during that
step only. Values whose lifetimes do not overlap share bytes. Placement is greedy,
largest first, each at the lowest aligned offset free for its whole lifetime.

Params, constants and ``arange`` live in persistent buffers of their own (uploaded
once); ``reshape`` outputs are aliases of their input's bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import Graph, Ref

from .lower import ALIAS_KINDS, PERSISTENT_KINDS
from .steps import Step

__all__ = ["Placement", "MemoryPlan", "plan_memory", "ARENA_ALIGN"]

ARENA_ALIGN = 256


@dataclass(frozen=True)
class Placement:
    offset: int
    nbytes: int
    first: int
    last: int


@dataclass
class MemoryPlan:
    placements: dict[Ref, Placement]   # arena values
    scratch: dict[int, Placement]      # step index -> its scratch
    aliases: dict[Ref, Ref]            # value -> the value whose bytes it views
    persistent: list[Ref]              # values with their own buffer
    size: int

    def root(self, ref: Ref) -> Ref:
        while ref in self.aliases:
            ref = self.aliases[ref]
        return ref


def plan_memory(graph: Graph, steps: list[Step], alignment: int = ARENA_ALIGN) -> MemoryPlan:
    aliases = {Ref(n.id): n.inputs[0] for n in graph.nodes if n.kind in ALIAS_KINDS}

    def root(r: Ref) -> Ref:
        while r in aliases:
            r = aliases[r]
        return r

    persistent = [Ref(n.id) for n in graph.nodes if n.kind in PERSISTENT_KINDS]
    fixed = set(persistent)
    first: dict[Ref, int] = {Ref(n.id): -1 for n in graph.input_nodes}
    last: dict[Ref, int] = {}
    for i, step in enumerate(steps):
        for r in step.reads:
            base = root(r)
            last[base] = max(last.get(base, -1), i)
        for r in step.writes:
            first.setdefault(r, i)
    for r in graph.outputs:
        last[root(r)] = len(steps)
    items = [(("value", r), start, last.get(r, start), graph.shape_of(r).nbytes)
             for r, start in first.items() if r not in fixed]
    items += [(("scratch", i), i, i, s.scratch) for i, s in enumerate(steps) if s.scratch]
    items.sort(key=lambda t: (-t[3], t[1], str(t[0])))
    placed: list[tuple[int, int, int, int]] = []
    values, scratch = {}, {}
    for key, start, stop, nbytes in items:
        size = -(-max(nbytes, 1) // alignment) * alignment
        offset = 0
        for lo, hi, f, l in sorted(p for p in placed if not (p[3] < start or stop < p[2])):
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, offset + size, start, stop))
        place = Placement(offset, nbytes, start, stop)
        (values if key[0] == "value" else scratch)[key[1]] = place
    return MemoryPlan(values, scratch, aliases, persistent, max((p[1] for p in placed), default=0))

"""Device memory planning: every value a run produces gets a fixed slice of one arena.

Lifetimes are step intervals ``[written, last read]`` (graph inputs are written before
the first step, graph outputs live to the end); a step's scratch lives during that
step only. Values whose lifetimes do not overlap share bytes. Placement (``rlx_core.runtime.arena.place``) is greedy,
largest first, each at the lowest aligned offset free for its whole lifetime.

Graph inputs come first, packed back to back at the start of the arena and never
shared, so that a run stages every host input with one copy (see
``rlx_cuda.staging``). Params, constants and ``arange`` live in persistent buffers of
their own (uploaded once); ``aliases`` (reshapes, see ``rlx_cuda.views``) share their input's bytes, and
values no step writes (folded views) get no memory at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import Graph, Ref
from rlx_core.runtime.arena import Placement, place

from .lower import PERSISTENT_KINDS
from .steps import Step

__all__ = ["Placement", "MemoryPlan", "plan_memory", "ARENA_ALIGN"]

ARENA_ALIGN = 256


@dataclass
class MemoryPlan:
    placements: dict[Ref, Placement]   # arena values
    scratch: dict[int, Placement]      # step index -> its scratch
    aliases: dict[Ref, Ref]            # value -> the value whose bytes it views
    persistent: list[Ref]              # values with their own buffer
    size: int
    input_bytes: int = 0               # the inputs' block: arena bytes [0, input_bytes)

    def root(self, ref: Ref) -> Ref:
        while ref in self.aliases:
            ref = self.aliases[ref]
        return ref


def plan_memory(graph: Graph, steps: list[Step], aliases: dict[Ref, Ref],
                alignment: int = ARENA_ALIGN) -> MemoryPlan:

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
    values: dict[Ref, Placement] = {}
    input_bytes = 0
    for node in graph.input_nodes:
        r = Ref(node.id)
        nbytes = graph.shape_of(r).nbytes
        values[r] = Placement(input_bytes, nbytes, -1, last.get(r, -1))
        input_bytes += -(-max(nbytes, 1) // alignment) * alignment
    buffers = {("value", r): (start, last.get(r, start), graph.shape_of(r).nbytes)
               for r, start in first.items() if r not in fixed and r not in values}
    buffers.update({("scratch", i): (i, i, s.scratch) for i, s in enumerate(steps) if s.scratch})
    placements, size = place(buffers, alignment)
    values.update({key[1]: _shifted(p, input_bytes) for key, p in placements.items() if key[0] == "value"})
    scratch = {key[1]: _shifted(p, input_bytes) for key, p in placements.items() if key[0] == "scratch"}
    return MemoryPlan(values, scratch, aliases, persistent, input_bytes + size, input_bytes)


def _shifted(p: Placement, by: int) -> Placement:
    return Placement(p.offset + by, p.nbytes, p.first, p.last)

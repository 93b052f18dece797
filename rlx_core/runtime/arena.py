"""Arena placement for backends that plan a run's memory ahead of time.

A backend describes every buffer of a run by its lifetime in steps -- written at
``first`` (-1: before the first step), last read at ``last`` -- and its size; buffers
whose lifetimes do not overlap may share bytes. :func:`place` packs them greedily,
largest first, each at the lowest aligned offset free for its whole lifetime, and
returns the offsets and the arena's size. Which buffers exist, and how long they live,
is the backend's business (views, persistent params, scratch); this is only the packing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, TypeVar

__all__ = ["Placement", "place"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Placement:
    offset: int
    nbytes: int
    first: int  # step that writes the buffer (-1: before the first step, e.g. a graph input)
    last: int   # last step that reads it (the step count: a graph output, read after the run)


def place(buffers: Mapping[K, tuple[int, int, int]], alignment: int) -> tuple[dict[K, Placement], int]:
    """``{key: (first, last, nbytes)}`` -> (``{key: Placement}``, arena bytes). Ties in
    size go to the earlier buffer, then to the key's text, so a plan is deterministic."""
    order = sorted(buffers, key=lambda k: (-buffers[k][2], buffers[k][0], str(k)))
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    placements: dict[K, Placement] = {}
    for key in order:
        first, last, nbytes = buffers[key]
        size = -(-max(nbytes, 1) // alignment) * alignment
        offset = 0
        for lo, hi, _, _ in sorted(p for p in placed if not (p[3] < first or last < p[2])):
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, offset + size, first, last))
        placements[key] = Placement(offset, nbytes, first, last)
    return placements, max((p[1] for p in placed), default=0)

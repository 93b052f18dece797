"""Arena planning: every buffer a run touches is a fixed, aligned slice of one GPU buffer.

Items (values and scratch regions) have a byte size and a lifetime ``[first, last]`` in
step numbers; items whose lifetimes overlap get disjoint bytes, the others may share.
Placement is greedy, largest first, each at the lowest aligned offset free for its
whole lifetime -- near optimal for the chains and diamonds networks are made of.
Offsets are multiples of the device's ``min-storage-buffer-offset-alignment`` (and of
16, so vec4 bindings line up), because each item is bound at its own offset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

__all__ = ["Item", "plan"]


@dataclass(frozen=True)
class Item:
    key: Hashable
    nbytes: int
    first: int  # step that writes it first (-1: written before the first step)
    last: int   # step that reads it last (a large number: alive to the end, or forever)


def plan(items: list[Item], alignment: int) -> tuple[dict[Hashable, int], int]:
    """``({key: offset}, total bytes)`` for ``items`` (see the module docstring)."""
    placed: list[tuple[int, int, Item]] = []  # (offset, end, item)
    offsets = {}
    for item in sorted(items, key=lambda it: (-it.nbytes, it.first, str(it.key))):
        size = -(-item.nbytes // alignment) * alignment
        offset = 0
        for start, end, other in sorted(placed, key=lambda p: p[0]):
            if other.last < item.first or item.last < other.first:
                continue  # lifetimes do not overlap: bytes may be shared
            if offset + size <= start:
                break
            offset = max(offset, end)
        placed.append((offset, offset + size, item))
        offsets[item.key] = offset
    return offsets, max((end for _, end, _ in placed), default=0)

"""Launch geometry: how many blocks of how many threads each kernel family runs.

Elementwise-style kernels use grid-stride loops, so the grid is capped (each thread
then handles several elements of a large tensor); row kernels run one block per row,
with a power-of-two block sized to the row (the tree reduction needs a power of two).
"""
from __future__ import annotations

__all__ = ["ELEMENTWISE_BLOCK", "MAX_GRID", "elementwise_grid", "row_block", "row_grid"]

ELEMENTWISE_BLOCK = 256
MAX_GRID = 65535 * 4  # blocks; beyond this, grid-stride loops take over


def elementwise_grid(n: int, block: int = ELEMENTWISE_BLOCK) -> tuple[int, int]:
    """(grid, block) for ``n`` independent elements; (0, block) when there is nothing to do."""
    return min(-(-n // block), MAX_GRID), block


def row_block(row_length: int, lo: int = 32, hi: int = 1024) -> int:
    """The power-of-two block for one row of ``row_length`` elements: about one element
    per thread up to 256 threads, then up to ``hi`` for rows of thousands."""
    want = max(lo, min(hi, row_length if row_length <= 256 else row_length // 4))
    block = lo
    while block < want:
        block *= 2
    return min(block, hi)


def row_grid(rows: int) -> int:
    return min(rows, MAX_GRID)

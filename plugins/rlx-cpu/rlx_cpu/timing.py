"""Timing the ways of doing one thing against each other (compile-time choices)."""
from __future__ import annotations

import time
from typing import Callable

__all__ = ["interleaved_times"]


def interleaved_times(ways: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each way: ``rounds`` rounds, each way once per round after an
    untimed call, the order rotating from round to round (so that a change of the
    machine's state during the measurement falls on every way alike)."""
    names = list(ways)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = ways[name]
            fn()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times

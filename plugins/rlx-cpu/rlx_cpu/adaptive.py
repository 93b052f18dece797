"""A run with two plans, kept on whichever has been faster lately.

How much a multi-threaded BLAS call gains depends on more than its own time: the next
kernels on the calling core then read (or overwrite) data the other core touched, and
on this VM those cache-line transfers cost from almost nothing to 7x a kernel's own
time (im2col after a two-thread GEMM: 19 us or 149 us), changing with where the host
places the two vCPUs. So a run whose plan puts BLAS calls on several cores keeps a
second plan with every BLAS call on one thread, and ``AdaptiveRun`` times each run
(two clock reads): it runs the current plan, every ``PROBE_EVERY_S`` runs the other
one ``PROBE_RUNS`` times, and switches when the other's median over those runs is
below ``SWITCH_BELOW`` times the current one's over its last ``PROBE_RUNS`` runs.
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable, Mapping

import numpy as np

__all__ = ["AdaptiveRun"]

PROBE_EVERY_S = 1.0
PROBE_RUNS = 5  # after one untimed run of the other plan
SWITCH_BELOW = 0.95

Run = Callable[[Mapping[str, np.ndarray]], None]


class AdaptiveRun:
    """``run(feeds)`` on one of ``plans`` (see the module docstring); ``current`` is
    the index of the plan in use."""

    def __init__(self, plans: list[Run]):
        self.plans = plans
        self.current = 0
        self._times: list[deque[float]] = [deque(maxlen=PROBE_RUNS) for _ in plans]
        self._probe_at = time.perf_counter()  # probe early: the first runs decide
        self._probing = -1  # runs of the other plan left in this probe, -1: none

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> None:
        plan = self.current if self._probing < 0 else 1 - self.current
        t0 = time.perf_counter()
        self.plans[plan](feeds)
        t1 = time.perf_counter()
        if self._probing < 0:
            self._times[plan].append(t1 - t0)
            if t1 >= self._probe_at and len(self._times[plan]) >= PROBE_RUNS:
                self._probing = PROBE_RUNS
            return
        if self._probing < PROBE_RUNS:  # the probe's first run (caches, code) is not timed
            self._times[plan].append(t1 - t0)
        self._probing -= 1
        if self._probing < 0:
            self._decide()
            self._probe_at = t1 + PROBE_EVERY_S

    def _decide(self) -> None:
        other = 1 - self.current
        if statistics.median(self._times[other]) < SWITCH_BELOW * statistics.median(self._times[self.current]):
            self.current = other

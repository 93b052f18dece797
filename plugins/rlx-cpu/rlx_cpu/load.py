"""Is another process using the cores? A cheap, lazily refreshed answer for BLAS plans.

OpenBLAS splits a GEMM statically between its threads and waits for all of them, so
while another process holds a core a multi-threaded GEMM stalls for scheduler time
slices (measured on this 2-core VM with a busy loop in another process: median 0.42 ms,
but every tenth call 36-48 ms). One thread never stalls. So each BLAS call has one plan
per machine state (``rlx_cpu.threads``), and a run follows the current state:

* ``"quiet"`` -- other processes used less than ``QUIET_CORES`` cores over the last
  sampling window (Linux: ``/proc/stat`` less this process's own time, steal time
  counted as busy), and no stall was reported within ``STALL_HOLD_S``;
* ``"loaded"`` -- they used more than ``LOADED_CORES`` (between the two thresholds the
  state stays as it was), or runs reported two stalls within ``STALL_PAIR_S``: calls
  on several cores that took far longer than measured (``report_stall``). When load
  starts, the stalls come in quick succession and switch the state before the sampling
  window does; a lone slow call (the host taking the vCPU for a few ms, which happens
  to single-threaded calls too) does not.

``state()`` costs one clock read; every ``PERIOD_S`` it re-reads ``/proc/stat`` and
``times(2)`` (about 30 us). A window much longer than that (the process was idle) only
starts a new one, the state kept: it would mostly describe what ran while we did not.
Where ``/proc`` is missing only stalls switch the state. Until its first window is
judged the state is ``"quiet"`` but not ``settled``: a choice measured then is not
known to have been measured on a quiet machine.

``idle_machine()`` answers a stricter question for measurements made in the background
(``rlx_cpu.planner``): did *every* thread -- other processes and this one's, such as
another runtime's spinning thread pool in the same process -- stay below
``QUIET_CORES`` over a window?
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable

__all__ = ["MachineLoad", "machine_load", "idle_machine", "QUIET", "LOADED"]

QUIET, LOADED = "quiet", "loaded"
PERIOD_S = 0.25  # sampling window: long enough for tick-based accounting (10 ms ticks on 2+ cores)
QUIET_CORES = 0.15
LOADED_CORES = 0.35
STALL_HOLD_S = 2.0  # after a stall, stay loaded at least this long
STALL_PAIR_S = 0.5
_STALE_S = 2 * PERIOD_S


class MachineLoad:
    """The machine's state as seen by this process (see the module docstring); tests
    give their own ``stat_path`` and ``own_ticks`` (this process's CPU time in ticks)."""

    def __init__(self, stat_path: str = "/proc/stat", own_ticks: Callable[[], int] | None = None):
        self._stat_path = stat_path
        self._own_ticks = own_ticks or _own_ticks
        self._lock = threading.Lock()
        self._state = QUIET
        self._stalled_at = -float("inf")
        self._last_stall = -float("inf")  # the last stall reported, counted or not
        self._sample = self._read()
        self._next = time.monotonic() + PERIOD_S
        self.others = 0.0  # cores other processes used over the last window
        self.settled = False  # whether a window has been judged (the state is not the initial guess)

    def state(self) -> str:
        now = time.monotonic()
        if now >= self._next:
            self._refresh(now)
        return self._state

    def report_stall(self) -> None:
        """A multi-threaded call stalled: after the second within ``STALL_PAIR_S``, treat
        the machine as loaded for a while."""
        with self._lock:
            now = time.monotonic()
            if now - self._last_stall <= STALL_PAIR_S:
                self._stalled_at = now
                self._state = LOADED
            self._last_stall = now

    def _refresh(self, now: float) -> None:
        with self._lock:
            if now < self._next:
                return
            sample = self._read()
            if sample is None or self._sample is None:
                if now - self._stalled_at > STALL_HOLD_S:
                    self._state = QUIET
            elif sample[0] - self._sample[0] <= _STALE_S:
                self._judge(sample, now)
            self._sample = sample
            self._next = now + PERIOD_S

    def _judge(self, sample: tuple[float, int, int], now: float) -> None:
        """Set the state from the window between the last sample and ``sample``."""
        wall = sample[0] - self._sample[0]
        busy_ticks = (sample[1] - self._sample[1]) - (sample[2] - self._sample[2])
        self.others = max(0.0, busy_ticks / _TICKS_PER_S / wall) if wall > 0 else 0.0
        self.settled = True
        if self.others > LOADED_CORES:
            self._state = LOADED
        elif self.others < QUIET_CORES and now - self._stalled_at > STALL_HOLD_S:
            self._state = QUIET

    def _read(self) -> tuple[float, int, int] | None:
        """(monotonic time, busy ticks of all cores, this process's ticks), or None."""
        busy = busy_ticks(self._stat_path)
        return None if busy is None else (time.monotonic(), busy, self._own_ticks())


def busy_ticks(stat_path: str = "/proc/stat") -> int | None:
    """Busy clock ticks of all cores since boot (``/proc/stat``), or None where unreadable."""
    try:
        fd = os.open(stat_path, os.O_RDONLY)  # no buffered file object: see _own_ticks
        try:
            line = os.read(fd, 160)
        finally:
            os.close(fd)
        # "cpu  user nice system idle iowait irq softirq steal ..." (guest time is in user)
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, line.split(None, 9)[1:9])
    except (OSError, ValueError):
        return None
    return user + nice + system + irq + softirq + steal


def idle_machine(window_s: float = PERIOD_S, stat_path: str = "/proc/stat",
                 sleep: Callable[[float], None] = time.sleep) -> bool:
    """Whether all threads of all processes, this one's included, used less than
    ``QUIET_CORES`` over the next ``window_s`` (the caller sleeps through it). True
    where ``/proc/stat`` is unreadable: nothing then says otherwise."""
    start, t0 = busy_ticks(stat_path), time.monotonic()
    sleep(window_s)
    end, wall = busy_ticks(stat_path), max(time.monotonic() - t0, window_s)
    if start is None or end is None:
        return True
    return (end - start) / _TICKS_PER_S / wall < QUIET_CORES


def _own_ticks() -> int:
    """This process's CPU time in clock ticks, all threads (``times(2)``, the unit of
    ``/proc/stat``). Reading it and ``/proc/stat`` allocates a few hundred bytes: a run
    that refreshes the state stays within what a steady-state run may allocate."""
    t = os.times()
    return round((t.user + t.system) * _TICKS_PER_S)


_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_load: MachineLoad | None = None


def machine_load() -> MachineLoad:
    """The process's sensor (created on first use)."""
    global _load
    if _load is None:
        _load = MachineLoad()
    return _load

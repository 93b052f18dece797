"""Measured choices (BLAS thread plans, conv routes, fused or not): measured once per
machine, kept, and measured again only in the background.

A choice lives in the kernel cache's decisions file for this machine's fingerprint
(``cache.Decisions``), so the next process compiles without measuring it -- also when
the machine is loaded by then. ``choice()`` is how a compile gets one:

* stored -- used as is; if stored *provisional*, a background measurement is requested;
* missing, with a default (BLAS thread plans, which the executable's adaptive run
  corrects at run time) -- the default, and a background measurement is requested;
* missing, without a default (a conv route shapes the memory plan: the compile needs
  it now) -- measured now and stored, provisional unless the machine-load sensor had
  judged the machine quiet before and after the measurement (``MachineLoad.settled``).

The background planner (one daemon thread per process, started on the first request)
measures a request only while the whole machine is idle -- every thread of every
process, this one's included, below ``load.QUIET_CORES`` over a window: another
runtime's spinning thread pool in this process counts too -- and stores the result
only if the machine is idle again in a window after it. A request that fails either
check stays queued and is tried again later. Measurements run on sample data of their
own, never on an executable's buffers, so a run may go on meanwhile (its BLAS calls set
OpenBLAS's thread count for themselves). A compile never waits for one.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Callable

from .cache import Decisions
from .load import QUIET, idle_machine, machine_load
from .parallel import PerProcess

__all__ = ["Planner", "planner", "choice"]

log = logging.getLogger("rlx.cpu")

Measure = Callable[[], "str | None"]  # a choice's value, or None: the measurement was not clean
RETRY_S = 1.0  # between attempts while the machine is busy
SETTLE_S = 0.15  # after a measurement: OpenBLAS's threads spin on for about 100 ms


class Planner:
    """Background measurements (see the module docstring); ``idle()`` says whether the
    machine is idle now (it may sleep through its window). Without ``background`` no
    thread is started: the caller makes the ``attempt()`` s (tests)."""

    def __init__(self, idle: Callable[[], bool] = idle_machine, settle_s: float = SETTLE_S, background: bool = True):
        self._idle, self._settle_s, self._background = idle, settle_s, background
        self._cond = threading.Condition()
        self._pending: OrderedDict[tuple[int, str], tuple[Decisions, str, Measure]] = OrderedDict()
        self._thread: threading.Thread | None = None

    def request(self, decisions: Decisions, key: str, measure: Measure) -> None:
        """Measure ``key`` in the background when the machine is idle (once per process)."""
        with self._cond:
            self._pending.setdefault((id(decisions), key), (decisions, key, measure))
            if self._thread is None and self._background:
                self._thread = threading.Thread(target=self._serve, name="rlx-cpu-planner", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> list[str]:
        with self._cond:
            return [key for _, key, _ in self._pending.values()]

    def attempt(self) -> bool:
        """Measure the oldest request if the machine is idle, and store it if it still is
        after; whether one was stored."""
        with self._cond:
            if not self._pending:
                return False
            slot, (decisions, key, measure) = next(iter(self._pending.items()))
        if not self._idle():
            return False
        try:
            value = measure()
        except Exception:  # noqa: BLE001 -- a failed measurement must not kill the thread
            log.exception("rlx-cpu: measuring %s failed; dropped", key)
            value = None
            self._forget(slot)
        if value is None:
            return False
        time.sleep(self._settle_s)
        if not self._idle():
            return False
        decisions.set(key, value)
        self._forget(slot)
        log.debug("rlx-cpu: measured %s in the background: %s", key, value)
        return True

    def _forget(self, slot) -> None:
        with self._cond:
            self._pending.pop(slot, None)

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
            if not self.attempt():
                time.sleep(RETRY_S)


planner = PerProcess(Planner)  # the process's planner


def choice(decisions: Decisions, key: str, measure: Measure, valid: Callable[[str], bool] = lambda v: True,
           default: str | None = None) -> str:
    """The choice stored for ``key``, else ``default``, else one measured now (see the
    module docstring). ``valid`` rejects a stored value this build cannot use."""
    value = decisions.get(key)
    if value is not None and valid(value):
        if decisions.provisional(key):
            planner().request(decisions, key, measure)
        return value
    if default is not None:
        planner().request(decisions, key, measure)
        return default
    sensor = machine_load()
    quiet_before = sensor.state() == QUIET and sensor.settled
    value = measure()
    provisional = not (quiet_before and sensor.state() == QUIET)
    decisions.set(key, value, provisional=provisional)
    if provisional:
        planner().request(decisions, key, measure)
    return value

"""Runtime tracing, gated by ``RLX_TRACE`` (or ``CompileOptions(trace=True)``).

Backends wrap each step of a traced executable in :meth:`Tracer.span`. At the end of
every run the tracer logs a per-op table to the ``rlx.trace`` logger and, when
``RLX_TRACE_FILE`` names a path, appends the run's events to a Chrome trace file
(open it in chrome://tracing or https://ui.perfetto.dev).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager

__all__ = ["Tracer"]

log = logging.getLogger("rlx.trace")


class Tracer:
    def __init__(self, graph_name: str, device: str, path: str | None = None):
        self.graph_name = graph_name
        self.device = device
        self.path = path if path is not None else os.environ.get("RLX_TRACE_FILE") or None
        self.events: list[dict] = []
        self.totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        self._lock = threading.Lock()

    @contextmanager
    def span(self, label: str, kind: str = "op"):
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            t1 = time.perf_counter_ns()
            with self._lock:
                self.events.append({"name": label, "cat": kind, "ph": "X", "ts": t0 / 1e3,
                                    "dur": (t1 - t0) / 1e3, "pid": self.device, "tid": self.graph_name})
                tot = self.totals[label]
                tot[0] += (t1 - t0) / 1e3
                tot[1] += 1

    def end_run(self) -> None:
        """Log this run's per-op times and flush events to the trace file."""
        with self._lock:
            events, self.events = self.events, []
        if log.isEnabledFor(logging.INFO) and events:
            rows = sorted(events, key=lambda e: -e["dur"])
            total = sum(e["dur"] for e in events)
            lines = [f"{self.graph_name} on {self.device}: {len(events)} ops, {total:.1f} us"]
            lines += [f"  {e['dur']:10.1f} us  {e['name']}" for e in rows[:20]]
            log.info("\n".join(lines))
        if self.path and events:
            _append_chrome_events(self.path, events)


def _append_chrome_events(path: str, events: list[dict]) -> None:
    """Keep the file a valid JSON array while appending (read, extend, replace)."""
    try:
        with open(path) as f:
            existing = json.load(f)
        if not isinstance(existing, list):
            existing = []
    except (OSError, ValueError):
        existing = []
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(existing + events, f)
    os.replace(tmp, path)

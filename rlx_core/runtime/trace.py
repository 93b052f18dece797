"""Runtime tracing, gated by ``RLX_TRACE`` (or ``CompileOptions(trace=True)``).

Backends wrap each step of a traced executable in :meth:`Tracer.span`. At the end of
every run the tracer logs a per-op table to the ``rlx.trace`` logger and, when
``RLX_TRACE_FILE`` names a path, hands the run's events to the one writer of that path
in this process (open the file in chrome://tracing or https://ui.perfetto.dev).

The writer buffers events and appends them when :data:`FLUSH_EVENTS` are pending or
:data:`FLUSH_SECONDS` passed since its last write, at exit, and on :func:`flush_traces`.
Appending costs what is appended, never the file's size: the file stays one JSON array,
extended in place over its closing ``]`` under an exclusive lock, so threads and
processes tracing into one file each add their events. The file is created 0600 and
never opened through a link (``rlx_core.runtime.safefs``). Tracing never raises out of
a run: a path that cannot be written costs the trace (one warning), not the run.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import defaultdict
from contextlib import contextmanager

from .safefs import open_trusted

try:
    import fcntl
except ImportError:  # Windows: threads of one process still go through one writer
    fcntl = None

__all__ = ["Tracer", "flush_traces", "FLUSH_EVENTS", "FLUSH_SECONDS"]

log = logging.getLogger("rlx.trace")
FLUSH_EVENTS = 4096
FLUSH_SECONDS = 1.0


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
        """Log this run's per-op times and pass its events to the trace file's writer."""
        with self._lock:
            events, self.events = self.events, []
        try:
            if log.isEnabledFor(logging.INFO) and events:
                rows = sorted(events, key=lambda e: -e["dur"])
                total = sum(e["dur"] for e in events)
                lines = [f"{self.graph_name} on {self.device}: {len(events)} ops, {total:.1f} us"]
                lines += [f"  {e['dur']:10.1f} us  {e['name']}" for e in rows[:20]]
                log.info("\n".join(lines))
            if self.path and events:
                _writer(self.path).add(events)
        except Exception as e:  # noqa: BLE001 -- tracing must never fail a run
            log.warning("tracing %s failed: %s: %s", self.graph_name, type(e).__name__, e)


class _TraceFile:
    """The one writer of a trace file in this process."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()        # pending events
        self._write_lock = threading.Lock()  # the file
        self._pending: list[dict] = []
        self._last = time.monotonic()
        self._warned = False

    def add(self, events: list[dict]) -> None:
        with self._lock:
            self._pending.extend(events)
            if len(self._pending) < FLUSH_EVENTS and time.monotonic() - self._last < FLUSH_SECONDS:
                return
        self.flush()

    def flush(self) -> None:
        with self._write_lock:
            with self._lock:
                events, self._pending = self._pending, []
                self._last = time.monotonic()
            if not events:
                return
            try:
                _append(self.path, events)
            except Exception as e:  # noqa: BLE001 -- a trace that cannot be written costs the trace only
                if not self._warned:
                    self._warned = True
                    log.warning("cannot write the trace file %s (%s: %s); trace events are dropped",
                                self.path, type(e).__name__, e)


def _append(path: str, events: list[dict]) -> None:
    """Add ``events`` to the JSON array in ``path`` (created when missing or empty) by
    writing over its closing bracket; a file that is not such an array is left alone."""
    body = ",\n".join(json.dumps(e) for e in events).encode()
    with os.fdopen(open_trusted(path, writable=True), "r+b") as f:
        if fcntl is not None:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        end = f.seek(0, os.SEEK_END)
        start = max(0, end - 64)
        f.seek(start)
        tail = f.read().rstrip()
        if not tail and start == 0:
            at, lead = 0, b"[\n"
        elif tail.endswith(b"]"):
            at = start + len(tail) - 1
            lead = b"\n" if tail[:-1].rstrip().endswith(b"[") else b",\n"
        else:
            raise ValueError("it does not end in a JSON array's ']' (delete it to start a new trace)")
        f.seek(at)
        f.write(lead + body + b"\n]\n")
        f.truncate()


_WRITERS: dict[str, _TraceFile] = {}
_WRITERS_LOCK = threading.Lock()


def _writer(path: str) -> _TraceFile:
    key = os.path.abspath(path)
    with _WRITERS_LOCK:
        if key not in _WRITERS:
            _WRITERS[key] = _TraceFile(key)
        return _WRITERS[key]


def flush_traces() -> None:
    """Write every pending trace event of this process (done at exit, too)."""
    with _WRITERS_LOCK:
        writers = list(_WRITERS.values())
    for writer in writers:
        writer.flush()


atexit.register(flush_traces)

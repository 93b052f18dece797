"""The async command stream: ``compiled.submit(inputs) -> Handle``.

Why: a device that queues work (CUDA streams, XLA's async dispatch, the wgpu and OpenCL
queues, MLX's ``async_eval``) can run one step while the host prepares the next. ``run``
waits for each result before returning; ``submit`` returns once the run is queued, so N
submits back to back keep the device busy, and the results are collected later.

Contract (every backend):

* inputs are checked at submit (a bad name, dims or dtype raises its ``RlxError`` there)
  and captured: the caller may overwrite its arrays as soon as ``submit`` returns;
* ``handle.wait()`` (alias ``result()``) blocks and returns the same ``Outputs`` that
  ``run`` returns; ``handle.done()`` says without blocking whether it would block;
* an exception raised while the queued run executes surfaces at ``wait()`` (every call);
* a result is never overwritten by a later submit, whatever order handles are waited in.

Backend side: ``ExecutableGraph.submit(inputs) -> Pending``. The default runs
synchronously (the handle is done at once), so every backend supports ``submit``; only
backends whose ``submit`` really queues advertise the ``async_pipeline`` capability.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

__all__ = ["Pending", "Handle"]

_UNSET = object()


class Pending:
    """A run a backend has started. ``ready()`` polls the device without blocking;
    ``finish()`` blocks until the run is done and returns its results as ``run`` would.
    ``finish`` is called at most once (the outcome, result or exception, is kept), from
    whichever thread waits first, so a backend can also call ``wait()`` itself to settle
    a run whose buffers it wants back."""

    __slots__ = ("_ready", "_finish", "_lock", "_results", "_error")

    def __init__(self, ready: Callable[[], bool], finish: Callable[[], Sequence[Any]]):
        self._ready, self._finish = ready, finish
        self._lock = threading.Lock()
        self._results: Any = _UNSET
        self._error: BaseException | None = None

    @classmethod
    def run_now(cls, run: Callable[[Mapping[str, Any]], Sequence[Any]], inputs: Mapping[str, Any]) -> "Pending":
        """A run made synchronously here: the default of backends that do not queue. Its
        exception is kept for ``wait`` as a queued run's would be."""
        try:
            results = run(inputs)
        except Exception as e:
            return cls.failed(e)
        pending = cls(_always, _never)
        pending._results = results
        return pending

    @classmethod
    def failed(cls, error: Exception) -> "Pending":
        """A run that failed before it could be queued (e.g. a program the device ran
        inline, at the call): ``wait`` raises ``error``, as for a failure in the queue."""
        pending = cls(_always, _never)
        pending._error = error
        return pending

    def done(self) -> bool:
        if self._results is not _UNSET or self._error is not None:
            return True
        try:
            return bool(self._ready())
        except Exception:  # a failed poll: the run failed, and wait() will say how
            return True

    def wait(self) -> Sequence[Any]:
        with self._lock:
            if self._results is _UNSET and self._error is None:
                try:
                    self._results = self._finish()
                except Exception as e:
                    self._error = e
                self._ready = self._finish = None  # drop what the run held (buffers, events)
        if self._error is not None:
            raise self._error
        return self._results


class Handle:
    """One submitted run of a compiled graph (see the module docstring)."""

    __slots__ = ("_pending", "_outputs", "_lock", "_value")

    def __init__(self, pending: Pending, outputs: Callable[[Sequence[Any]], Any]):
        self._pending, self._outputs = pending, outputs
        self._lock = threading.Lock()
        self._value: Any = _UNSET

    def done(self) -> bool:
        """Whether the run has finished (``wait`` would not block)."""
        return self._pending.done()

    def wait(self):
        """The run's ``Outputs`` (blocks until it is done); raises what the run raised."""
        with self._lock:
            if self._value is _UNSET:
                self._value = self._outputs(self._pending.wait())
            return self._value

    result = wait

    def __repr__(self) -> str:
        return f"<rlx Handle {'done' if self.done() else 'pending'}>"


def _always() -> bool:
    return True


def _never():
    raise AssertionError("a Pending made by run_now has its outcome already")

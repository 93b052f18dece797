"""Two-core matmuls that degrade to one core instead of stalling.

OpenBLAS splits a GEMM statically between its threads and waits for all of them, so
when another process holds a core, a two-thread GEMM stalls until that core is free
again -- whole scheduler time slices, 10-100x its normal time on a loaded 2-core
machine. Here a GEMM is cut into column blocks (a batch of GEMMs into runs of batch
entries), each made of single-threaded BLAS calls, and two threads take blocks from a
shared counter: the calling thread and one helper (numpy releases the GIL inside
BLAS). If the helper is not scheduled, the caller simply does every block itself; it
only waits for a block the helper has started.

``matmul_blocks`` cuts a matmul into blocks; ``shared_work().run(blocks)`` runs them.
``rlx_cpu.threads`` decides per GEMM whether sharing pays (against OpenBLAS's own
threads and one thread).
"""
from __future__ import annotations

import functools
import itertools
import os
import threading
from typing import Callable

import numpy as np

__all__ = ["SharedWork", "shared_work", "matmul_blocks", "PerProcess"]

_BLOCK_COLUMNS = 64  # narrower blocks would make BLAS calls too small to pay their overhead


class SharedWork:
    """A helper thread that shares lists of zero-argument jobs with the caller."""

    def __init__(self):
        self._wake = threading.Condition()
        self._jobs: list[Callable[[], object]] | None = None
        self._next = None  # an itertools.count: next(...) is atomic under the GIL
        self._busy = threading.Lock()  # held by the helper while it runs a job
        self._generation = 0
        self._caller = threading.Lock()  # one caller at a time (runs in other threads, the planner)
        threading.Thread(target=self._serve, name="rlx-cpu-helper", daemon=True).start()

    def run(self, jobs: list[Callable[[], object]]) -> None:
        """Run every job once, on this thread and the helper, and return when all are done."""
        with self._caller:
            counter = itertools.count()
            with self._wake:
                self._jobs, self._next = jobs, counter
                self._generation += 1
                self._wake.notify()
            for i in iter(lambda: next(counter), None):
                if i >= len(jobs):
                    break
                jobs[i]()
            with self._busy:  # the helper finished the job it had taken, if any
                self._jobs = None

    def _serve(self) -> None:
        seen = 0
        while True:
            with self._wake:
                while self._generation == seen:
                    self._wake.wait()
                seen = self._generation
                jobs, counter = self._jobs, self._next
            if jobs is None:
                continue
            while True:
                with self._busy:
                    i = next(counter)
                    if i >= len(jobs):
                        break
                    jobs[i]()


class PerProcess:
    """``get()``: one ``factory()`` object per process, made on first use; a forked child
    makes its own (the parent's threads do not run in it)."""

    def __init__(self, factory: Callable[[], object]):
        self._factory = factory
        self._lock = threading.Lock()
        self.made: tuple[int, object] | None = None  # (pid, object)

    def __call__(self):
        with self._lock:
            if self.made is None or self.made[0] != os.getpid():
                self.made = (os.getpid(), self._factory())
            return self.made[1]


shared_work = PerProcess(SharedWork)  # the process's helper thread


def matmul_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> list[Callable[[], object]] | None:
    """``out = a @ b`` as blocks, each one or a few BLAS calls: column blocks of a 2-D
    product, runs of batch entries of a batched one; None when it does not split."""
    if a.ndim == 2 and b.ndim == 2:
        return _column_blocks(a, b, out)
    if a.ndim < 2 or b.ndim < 2:
        return None
    return _batch_blocks(a, b, out)


def _column_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> list[Callable[[], object]] | None:
    n = b.shape[1]
    if n < 2 * _BLOCK_COLUMNS:
        return None
    return [functools.partial(np.matmul, a, b[:, lo:hi], out=out[:, lo:hi])
            for lo, hi in _edges(n, n // _BLOCK_COLUMNS)]


def _batch_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> list[Callable[[], object]] | None:
    batch = out.shape[:-2]
    a_all, b_all = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    entries = [(a_all[i], b_all[i], out[i]) for i in np.ndindex(batch)]
    if len(entries) < 2:
        return None
    return [functools.partial(_matmuls, entries[lo:hi]) for lo, hi in _edges(len(entries), len(entries))]


def _matmuls(entries: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
    for a, b, out in entries:
        np.matmul(a, b, out=out)


def _edges(n: int, parts: int) -> list[tuple[int, int]]:
    """``range(n)`` cut into between 2 and 8 near-equal runs (at most ``parts``, at least 2)."""
    parts = max(2, min(8, parts, n))
    edges = [round(n * k / parts) for k in range(parts + 1)]
    return list(zip(edges, edges[1:]))

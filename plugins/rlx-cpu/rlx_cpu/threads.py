"""How each BLAS call of a run uses the cores: decided by measurement, once per shape.

numpy's OpenBLAS runs every GEMM on all cores, splitting it statically between its
threads; when another process holds a core, such a GEMM stalls for whole scheduler
time slices (we measured 10-100x on a loaded 2-core machine). So during a run
OpenBLAS is kept on one thread, and each 2-D matmul is timed two ways the first time
its shapes are compiled: as one single-threaded call, and as column blocks shared with
a helper thread (``rlx_cpu.parallel``: two cores when both are free, one core -- not a
stall -- when they are not). The faster way is kept; the choice is stored with the
kernel cache, so the measurement happens once per machine and shape. Batched and
smaller matmuls run single-threaded (tiny ones are left alone: OpenBLAS runs them on
one thread by itself, and switching costs a few microseconds per run).

``RLX_CPU_BLAS_THREADS=openblas`` leaves every call to OpenBLAS's own threads (no
switching, no helper); ``=1`` runs everything on one thread. Delete ``decisions.json``
in the kernel cache to measure again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
from functools import lru_cache

import numpy as np

from .cache import Decisions
from .kernels import Call
from .parallel import matmul_blocks, shared_work

__all__ = ["BlasThreads", "blas_threads", "plan_blas_call"]

log = logging.getLogger("rlx.cpu")
_decisions = Decisions()
_MARGIN = 0.85  # sharing must take at most this fraction of the single-threaded time
# OpenBLAS runs a GEMM of at most this many multiply-adds (M*N*K) on one thread anyway
# (interface/gemm.c: 65536 * GEMM_MULTITHREAD_THRESHOLD, which defaults to 4).
_OPENBLAS_SINGLE_THREADED = 65536 * 4


class BlasThreads:
    """The thread counts of every OpenBLAS in the process (numpy's, and scipy's, which
    numba loads): ``set(n)`` sets them all, ``restore()`` gives each its own count back.
    About 2 us per library."""

    def __init__(self, libraries):
        self._libraries = [(lib.set_num_threads, lib.num_threads) for lib in libraries]

    def set(self, n: int) -> None:
        for set_threads, _ in self._libraries:
            set_threads(n)

    def restore(self) -> None:
        for set_threads, default in self._libraries:
            set_threads(default)


@lru_cache(maxsize=1)
def blas_threads() -> BlasThreads | None:
    """Control of the OpenBLAS threads, or None (no multi-threaded OpenBLAS loaded)."""
    import numpy  # noqa: F401  (its OpenBLAS must be loaded for threadpoolctl to see it)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    libraries = [lib for lib in ThreadpoolController().lib_controllers
                 if lib.internal_api == "openblas" and lib.num_threads > 1]
    if not libraries:
        log.info("rlx-cpu: no multi-threaded OpenBLAS found; BLAS threads are left alone")
        return None
    return BlasThreads(libraries)


def plan_blas_call(call: Call) -> Call:
    """``call`` (an ``np.matmul`` with ``out=``) as the run should make it: on one
    OpenBLAS thread, or as blocks shared with the helper thread."""
    control = blas_threads()
    mode = os.environ.get("RLX_CPU_BLAS_THREADS", "")
    a, b = call.args
    if control is None or mode == "openblas" or _multiply_adds(a, b) <= _OPENBLAS_SINGLE_THREADED:
        return call
    single = call._replace(threads=1)
    blocks = matmul_blocks(*call.args, call.kwargs["out"]) if mode != "1" else None
    if blocks is None:
        return single
    shared = Call(shared_work().run, (blocks,), threads=1)
    arrays = [*call.args, call.kwargs["out"]]
    key = "blas:" + hashlib.sha256(repr([(a.shape, a.strides, a.dtype.str) for a in arrays]).encode()
                                   ).hexdigest()[:24]
    decided = _decisions.get(key)
    if decided is None:
        decided = "shared" if _shared_is_faster(control, single, shared) else "single"
        _decisions.set(key, decided)
    return shared if decided == "shared" else single


def _multiply_adds(a: np.ndarray, b: np.ndarray) -> int:
    """M*N*K of one matrix product of ``a @ b`` (batch dims aside)."""
    m = a.shape[-2] if a.ndim > 1 else 1
    n = b.shape[-1] if b.ndim > 1 else 1
    return m * n * a.shape[-1]


def _shared_is_faster(control: BlasThreads, single: Call, shared: Call, pairs: int = 5) -> bool:
    """Alternate timings of both ways (OpenBLAS on one thread); compare the medians."""
    times: dict[int, list[float]] = {id(single): [], id(shared): []}
    control.set(1)
    try:
        for _ in range(pairs):
            for c in (single, shared):
                c.fn(*c.args, **c.kwargs)
                t0 = time.perf_counter()
                c.fn(*c.args, **c.kwargs)
                times[id(c)].append(time.perf_counter() - t0)
    finally:
        control.restore()
    return np.median(times[id(shared)]) <= _MARGIN * np.median(times[id(single)])

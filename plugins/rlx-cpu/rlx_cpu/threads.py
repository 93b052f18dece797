"""How many threads each BLAS call uses: decided by measurement, once per shape.

numpy's OpenBLAS runs every GEMM on all cores. For the small GEMMs of inference
(attention heads, batch-1 layers) a second thread gains little, and when the cores
are shared with other processes it can cost a lot: OpenBLAS's threads wait for each
other, and a GEMM that needs two scheduled threads stalls for whole scheduler time
slices when one is not (we measured 100x on a loaded 2-core machine). So each BLAS
call of a compiled graph is timed with one thread and with the default count, in
alternation, and keeps more threads only if they win clearly. The choice is stored
with the kernel cache (keyed by the call's shapes and strides), so the measurement
happens once per machine and shape.

A run switches the count (through threadpoolctl's controller, one OpenBLAS call) where
it changes and restores the default at the end. ``RLX_CPU_BLAS_THREADS`` overrides the
choice: ``default`` (numpy's count everywhere) or a number (that count everywhere).
The stored choices reflect the load when they were measured; delete ``decisions.json``
in the kernel cache to measure again. Without OpenBLAS (another BLAS, or no threadpoolctl to find
it) nothing is switched.
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
from functools import lru_cache
from typing import Callable

import numpy as np

from .cache import Decisions

__all__ = ["blas_threads", "choose_threads"]

log = logging.getLogger("rlx.cpu")
_decisions = Decisions()
_MARGIN = 0.85  # more threads must take at most this fraction of one thread's time


class BlasThreads:
    """numpy's OpenBLAS thread count: ``default`` and ``set(n)`` (about 2 us)."""

    def __init__(self, set_threads: Callable[[int], None], default: int):
        self.set = set_threads
        self.default = default


@lru_cache(maxsize=1)
def blas_threads() -> BlasThreads | None:
    """Control of numpy's OpenBLAS threads, or None (not OpenBLAS, or only one core)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    for lib in ThreadpoolController().lib_controllers:
        if lib.internal_api == "openblas" and lib.num_threads > 1:
            return BlasThreads(lib.set_num_threads, lib.num_threads)
    log.info("rlx-cpu: no multi-threaded OpenBLAS found; BLAS thread counts are left alone")
    return None


def choose_threads(fn: Callable, args: tuple, kwargs: dict) -> int:
    """The thread count to run the BLAS call ``fn(*args, **kwargs)`` with."""
    control = blas_threads()
    forced = os.environ.get("RLX_CPU_BLAS_THREADS", "")
    if control is None or forced == "default":
        return control.default if control else 1
    if forced.isdigit():
        return max(1, int(forced))
    arrays = [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)]
    key = "threads:" + hashlib.sha256(repr([(a.shape, a.strides, a.dtype.str) for a in arrays]).encode()
                                      ).hexdigest()[:24]
    decided = _decisions.get(key)
    if decided is None:
        decided = str(_measure(control, lambda: fn(*args, **kwargs)))
        _decisions.set(key, decided)
    return int(decided)


def _measure(control: BlasThreads, call: Callable[[], None], pairs: int = 5) -> int:
    """Alternate one-thread and default-thread timings; more threads only if their median
    beats one thread's clearly. A multi-threaded run slower than 3 single-threaded ones
    (the cores are contended) ends the measurement at once."""
    one, many = [], []
    try:
        for _ in range(pairs):
            for n, times in ((1, one), (control.default, many)):
                control.set(n)
                call()
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            if many[-1] > 3 * one[-1]:
                return 1
    finally:
        control.set(control.default)
    return control.default if np.median(many) <= _MARGIN * np.median(one) else 1

"""Calibration of the CPU backend for the cost model (the ``rlx_calibrate`` hook).

Overheads, memory bandwidth and vector throughput are timed through the backend itself
with the core's graph-based helpers, so they include this backend's per-node Python
dispatch and its output copies. The GEMM rate is timed on numpy's BLAS directly, the
library the backend's matmul kernel calls, at the sizes where it reaches its plateau
(graph-level matmul overheads are already in the dispatch figure).
"""
from __future__ import annotations

import time

import numpy as np

from rlx_core.runtime import Device
from rlx_core.select.calibration import measure_backend, report_progress

__all__ = ["calibrate", "blas_sgemm_gflops"]

SGEMM_SIZES = (256, 512, 1024)
BUDGET_S = 3.0  # all of it; ops left untimed when the budget runs out use the FLOP rates


def calibrate(device: Device) -> dict:
    """Figures for ``rlx_core.select.calibration.Calibration`` (1.5-3 s on 2 cores)."""
    from .backend import CpuBackend
    start = time.perf_counter()
    report_progress(0.0, "BLAS sgemm")
    sgemm = blas_sgemm_gflops()
    return measure_backend(CpuBackend(), device, sgemm_gflops=sgemm,
                           budget_s=BUDGET_S - (time.perf_counter() - start))


def blas_sgemm_gflops(sizes=SGEMM_SIZES, repeats: int = 5) -> float:
    """Best f32 GEMM rate of numpy's BLAS over square ``sizes``, in GFLOP/s."""
    rng = np.random.default_rng(0)
    best = 0.0
    for n in sizes:
        a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        a @ b  # warm-up: BLAS thread pool start, page faults
        for _ in range(repeats):  # best of several: the VM shares its cores
            t0 = time.perf_counter_ns()
            a @ b
            best = max(best, 2.0 * n ** 3 / max(time.perf_counter_ns() - t0, 1))
    return best

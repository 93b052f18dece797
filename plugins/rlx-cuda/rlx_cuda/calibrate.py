"""Calibration for the cost model (the ``rlx_calibrate`` hook): what this GPU does in
practice, measured through the backend itself.

* ``sgemm_gflops``: a 2048^3 f32 matmul graph, 3 warm-up runs then the median of 10
  device-timed runs (CUDA events), in GFLOP/s (= FLOP/ns, the unit the core uses);
* ``memory_bw_gbps``: a device-to-device copy of 256 MiB (read + write bytes / time);
* ``roundtrip_overhead_ns``: host-to-result latency of a one-element graph run.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

__all__ = ["calibrate"]


def _device_ms(cp, fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def calibrate(index: int = 0, n: int = 2048) -> dict:
    from rlx_core import CompileOptions, Graph
    from .executable import CudaExecutable
    from .runtime import Runtime
    rt = Runtime.get(index)
    cp = rt.cp
    g = Graph("calibrate_sgemm")
    x = g.input("x", (n, n))
    w = g.param("w", (n, n))
    g.set_outputs([g.matmul(x, w)])
    exe = CudaExecutable(g, CompileOptions(backend={"device": index, "outputs": "cupy"}), rt)
    rng = np.random.default_rng(0)
    exe.set_param("w", rng.standard_normal((n, n)).astype(np.float32))
    xd = cp.asarray(rng.standard_normal((n, n)).astype(np.float32))
    with rt.device:
        for _ in range(3):
            exe.run_device([xd])
        ms = _device_ms(cp, lambda: exe.run_device([xd]), 10)
        src = cp.empty(256 << 20, cp.uint8)
        dst = cp.empty_like(src)
        copy_ms = _device_ms(cp, lambda: dst.__setitem__(Ellipsis, src), 10)
    tiny = Graph("calibrate_roundtrip")
    t = tiny.input("t", (1,))
    tiny.set_outputs([tiny.neg(t)])
    small = CudaExecutable(tiny, CompileOptions(backend={"device": index}), rt)
    one = np.ones(1, np.float32)
    for _ in range(3):
        small.run({"t": one})
    laps = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        small.run({"t": one})
        laps.append(time.perf_counter_ns() - t0)
    return {"device_name": rt.name, "sgemm_gflops": 2 * n ** 3 / (ms * 1e6),
            "memory_bw_gbps": 2 * (256 << 20) / (copy_ms * 1e6), "roundtrip_overhead_ns": float(statistics.median(laps))}

"""Calibration for the cost model: what the OpenCL device behind ``rocm`` really does.

* ``sgemm_gflops``: f32 matmul throughput (GFLOP/s) of the fastest GEMM tile
  (``rlx_rocm.codegen.linalg.TILES``), timed on device work alone (runs enqueued back to
  back, one wait), at 4096^3 on GPUs and 256^3 on CPU devices (PoCL runs at CPU
  speed); the winning tile is kept as this device's ``gemm_tile`` and used for every
  large product from then on;
* ``memory_bw_gbps``: bytes read plus written per second by a streaming kernel;
* ``roundtrip_overhead_ns``: one complete ``run`` of a one-element graph (input copy,
  kernel, output copy, wait): the fixed cost of any run;
* ``transfer_bw_gbps``: host <-> device bytes per second of complete runs of the
  streaming kernel, less its device time and the roundtrip;
* ``software``: the OpenCL device is the host CPU (PoCL): device selection never
  prefers it to ``cpu`` on these figures alone.

Results are cached per device in ``$XDG_CACHE_HOME/rlx/rocm-tuning-<device>.json``
(default ``~/.cache/rlx``), written atomically; a missing, stale or corrupt file is
measured again. ``python -m rlx_rocm.calibrate [--refresh] [--size N]`` prints the
result as JSON.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rlx_core import CompileOptions, Graph
from rlx_core.select.tuning import (batch_seconds, cached_tuning, calibration_main, positive_figures, random_feeds,
                                    read_tuning, roundtrip_ns, tiny_graph, transfer_gbps, tuning_path)

__all__ = ["calibrate", "cache_path", "load_tuning", "device_seconds", "KEYS"]

KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns", "transfer_bw_gbps")
GPU_TILES = ("128x128x16/8x8", "128x128x8/8x8", "128x64x16/8x4", "64x64x16/4x4", "64x64x8/4x4",
             "128x128x16/8x8/db", "128x128x8/8x8/db", "128x64x16/8x4/db", "64x64x16/4x4/db",
             "128x128x16/8x8/v", "128x128x8/8x8/v", "128x64x16/8x4/v", "64x128x16/4x8/v", "64x64x16/4x4/v")
CPU_TILES = ("64x64x16/4x4", "32x32x8/4x4")
FORMAT = 1


def cache_path(dev) -> Path:
    return tuning_path("rocm-tuning", dev.info["device"], dev.info["driver"])


def _valid(dev, data: dict) -> bool:
    from .codegen.linalg import parse_tile
    ok = data.get("format") == FORMAT and data.get("device_id") == dev.device_id and \
        isinstance(data.get("software"), bool) and positive_figures(data, KEYS)
    if ok:
        parse_tile(data["gemm_tile"])  # raises on a tile this version cannot build
    return ok


def load_tuning(dev) -> dict | None:
    """The cached calibration of ``dev``, or None when there is none (or it is corrupt or stale)."""
    return read_tuning(cache_path(dev), lambda data: _valid(dev, data))


def calibrate(refresh: bool = False, progress=None, matmul_size: int | None = None) -> dict:
    """Measure (or read from the cache) the device ``rocm`` opens here."""
    from rlx_core.runtime import registry
    from .opencl import open_device
    registry().backend("rocm")  # the probe: raises DeviceUnavailableError with the reason
    dev = open_device()
    n = matmul_size or (256 if dev.software else 4096)
    dev.tuning = cached_tuning(cache_path(dev), lambda data: _valid(dev, data),
                               lambda: _measure(dev, n, progress or (lambda m: None)), refresh)
    return dev.tuning


def device_seconds(exe, min_seconds: float = 0.2, max_repeats: int = 100) -> float:
    """Seconds per run of ``exe``'s device work (inputs already in place): runs enqueued
    back to back, one wait; enough of them to take ``min_seconds``; best of two."""
    def run(repeats: int) -> None:
        for _ in range(repeats):
            exe.enqueue()
        exe.queue.finish()
    return batch_seconds(run, min_seconds, max_repeats)


def _compiled(dev, graph: Graph, **backend):
    from .executable import RocmExecutable
    exe = RocmExecutable(graph, CompileOptions(backend=backend), dev)
    exe.run(random_feeds(graph))
    return exe


def _measure(dev, n: int, progress) -> dict:
    flops = 2.0 * n ** 3
    matmul = tiny_graph("calib-matmul", lambda g, a, b: g.matmul(a, b), (n, n), (n, n))
    measured = {}
    for tile in (CPU_TILES if dev.software else GPU_TILES):
        try:
            exe = _compiled(dev, matmul, gemm_tile=tile)
        except Exception as e:  # a tile this device cannot build or run
            progress(f"calibrate rocm: tile {tile} failed: {e}")
            continue
        measured[tile] = flops / device_seconds(exe, 0.1 if dev.software else 0.2) / 1e9
        progress(f"calibrate rocm: matmul {n}^3 tile {tile}: {measured[tile]:.1f} GFLOP/s")
        del exe
    best = max(measured, key=measured.get)
    size = min(1 << (22 if dev.software else 26), dev.max_alloc // 16)
    stream_graph = tiny_graph("calib-stream", lambda g, x: g.neg(x), (size,))
    stream = _compiled(dev, stream_graph)
    stream_s = device_seconds(stream, 0.1)
    bandwidth = 8.0 * size / stream_s / 1e9
    tiny = _compiled(dev, tiny_graph("calib-tiny", lambda g, x: g.neg(x), (1,)))
    roundtrip = roundtrip_ns(tiny, {"x0": np.zeros(1, np.float32)})
    transfer = transfer_gbps(stream, random_feeds(stream_graph), 8.0 * size, stream_s, roundtrip)
    progress(f"calibrate rocm: memory {bandwidth:.1f} GB/s, roundtrip {roundtrip / 1e3:.0f} us, "
             f"transfer {transfer:.1f} GB/s")
    return {"sgemm_gflops": measured[best], "memory_bw_gbps": bandwidth, "roundtrip_overhead_ns": roundtrip,
            "transfer_bw_gbps": transfer, "software": bool(dev.software), "gemm_tile": best, "matmul_size": n,
            "matmul_gflops_by_tile": measured, "device_id": dev.device_id, "format": FORMAT,
            **{k: v for k, v in dev.describe().items() if k in ("device", "platform", "driver", "stand_in")}}


def main(argv=None) -> int:
    return calibration_main(argv, prog="python -m rlx_rocm.calibrate", description=__doc__.splitlines()[0],
                            calibrate=calibrate, size_help="matmul size (default 4096 on GPUs, 256 on CPUs)")


if __name__ == "__main__":
    raise SystemExit(main())

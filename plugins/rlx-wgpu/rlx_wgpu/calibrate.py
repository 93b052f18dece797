"""Calibration for the cost model: what one wgpu device really does.

* ``sgemm_gflops``: f32 matmul throughput (GFLOP/s) of the fastest matmul tile, timed on
  device work alone (many products in one submit), at 4096^3 on GPUs (512^3 on CPU
  adapters such as lavapipe); the winning tile is kept as ``matmul_tile`` and used for
  every large product on this adapter from then on;
* ``memory_bw_gbps``: bytes read plus written per second by a streaming kernel;
* ``roundtrip_overhead_ns``: one complete ``run`` of a one-element graph (write the
  input, submit, map the output back), the fixed cost of any run;
* ``transfer_bw_gbps``: bytes written in plus read back per second by complete runs of
  the streaming kernel, less its device time and the roundtrip: the bus of a discrete
  GPU, the driver's copies on an integrated or software one;
* ``software``: the adapter is a software rasterizer on the host CPU (lavapipe, llvmpipe,
  SwiftShader, WARP; see ``rlx_wgpu.gpu.is_software``). Such an adapter is measured as
  it is, on the same kernels, with a matmul of 512^3 instead of 4096^3 (it runs at CPU
  speed); device selection never prefers it to the cpu device on these figures alone.

Results are cached per profile and adapter in ``$XDG_CACHE_HOME/rlx`` (default
``~/.cache/rlx``) as ``wgpu-calib-<profile>-<adapter>.json``, written atomically; a
missing or corrupt file is measured again. ``python -m rlx_wgpu.calibrate --device
vulkan [--refresh]`` prints the result as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from rlx_core import CompileOptions, Graph
from rlx_core.runtime import registry

from .codegen.linalg import TILES
from .encoder import Encoder
from .executable import WgpuExecutable
from .gpu import Gpu, open_gpu

__all__ = ["calibrate", "cache_path", "load_calibration", "device_seconds", "measure", "LARGE_TILES"]

KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")
LARGE_TILES = ("128x128x8/8x8", "128x128x16/8x8", "128x64x8/8x4", "64x64x16/4x4", "64x64x8/4x4")


def cache_path(gpu: Gpu) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlx"
    adapter = re.sub(r"[^A-Za-z0-9]+", "-", f"{gpu.info.get('device')}-{gpu.info.get('description')}").strip("-")
    return root / f"wgpu-calib-{gpu.profile.label}-{adapter[:80]}.json"


def load_calibration(gpu: Gpu) -> dict | None:
    """The cached calibration of ``gpu``, or None when there is none (or it is corrupt or
    stale)."""
    try:
        data = json.loads(cache_path(gpu).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and all(isinstance(data.get(k), (int, float)) and data[k] > 0 for k in KEYS)
    # Files written before transfer and software were measured are stale.
    ok = ok and isinstance(data.get("transfer_bw_gbps"), (int, float)) and isinstance(data.get("software"), bool)
    return data if ok and data.get("matmul_tile") in TILES else None


def calibrate(label: str, refresh: bool = False, progress=print, matmul_size: int | None = None) -> dict:
    """Measure (or read from the cache) the device of profile ``label``. ``matmul_size``
    overrides the matmul's n (4096 on GPUs, 512 on CPU adapters)."""
    registry().backend(label)  # the probe: raises DeviceUnavailableError with the reason
    gpu = open_gpu(label)
    cached = None if refresh else load_calibration(gpu)
    if cached is not None:
        gpu.tuning = cached
        return cached
    n = matmul_size or (512 if gpu.info.get("adapter_type") == "CPU" else 4096)
    result = measure(gpu, n, progress=progress)
    path = cache_path(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2))
    os.replace(tmp, path)
    gpu.tuning = result
    return result


def device_seconds(gpu: Gpu, exe: WgpuExecutable, min_seconds: float = 0.2) -> float:
    """Seconds per run of ``exe``'s device work (inputs already written): encode runs
    back to back in one submit, enough of them to take ``min_seconds``."""
    def timed(repeats: int) -> float:
        ctx = Encoder(gpu)
        start = time.perf_counter()
        for _ in range(repeats):
            exe.encode(ctx)
        ctx.flush()
        gpu.sync()
        return (time.perf_counter() - start) / repeats
    once = timed(1)  # warms caches and clocks, and sizes the batch
    repeats = max(2, min(200, int(min_seconds / max(once, 1e-6))))
    return min(timed(repeats) for _ in range(2))


def _graph(name: str, build, *shapes) -> Graph:
    g = Graph(name)
    g.set_outputs([build(g, *(g.input(f"x{i}", s) for i, s in enumerate(shapes)))])
    return g


def _compiled(gpu: Gpu, graph: Graph, **backend) -> WgpuExecutable:
    exe = WgpuExecutable(graph, CompileOptions(backend=backend), gpu, None)
    rng = np.random.default_rng(0)
    exe.run({n.attrs["name"]: rng.standard_normal(n.attrs["dims"]).astype(np.float32) for n in graph.input_nodes})
    return exe


def measure(gpu: Gpu, n: int, tiles=LARGE_TILES, progress=print) -> dict:
    """Measure ``gpu`` now (no cache): an f32 ``n``^3 matmul with each of ``tiles`` (the
    fastest becomes ``matmul_tile``), memory bandwidth, roundtrip and transfer (see the
    module docstring for the keys)."""
    flops = 2.0 * n ** 3
    matmul = _graph("calib-matmul", lambda g, a, b: g.matmul(a, b), (n, n), (n, n))
    measured = {}
    for tile in tiles:
        exe = _compiled(gpu, matmul, matmul_tile=tile)
        measured[tile] = flops / device_seconds(gpu, exe) / 1e9
        progress(f"calibrate {gpu.profile.label}: matmul {n}^3 tile {tile}: {measured[tile]:.0f} GFLOP/s")
        del exe
    best = max(measured, key=measured.get)
    size = min(16 * n * n, 1 << 26, gpu.max_binding_bytes // 4)  # at most 256 MiB in and out
    stream = _compiled(gpu, _graph("calib-stream", lambda g, x: g.neg(x), (size,)))
    bandwidth = 8.0 * size / device_seconds(gpu, stream) / 1e9
    tiny = _compiled(gpu, _graph("calib-tiny", lambda g, x: g.neg(x), (1,)))
    feed = {"x0": np.zeros(1, np.float32)}
    times = []
    for _ in range(30):
        start = time.perf_counter_ns()
        tiny.run(feed)
        times.append(time.perf_counter_ns() - start)
    roundtrip = float(np.median(times))
    progress(f"calibrate {gpu.profile.label}: memory {bandwidth:.1f} GB/s, roundtrip {roundtrip / 1e3:.0f} us")
    transfer = _transfer_gbps(stream, size, device_seconds(gpu, stream), roundtrip)
    return {"sgemm_gflops": measured[best], "memory_bw_gbps": bandwidth, "roundtrip_overhead_ns": roundtrip,
            "transfer_bw_gbps": transfer, "matmul_tile": best, "matmul_size": n, "matmul_gflops_by_tile": measured,
            **{k: v for k, v in gpu.describe().items() if k != "profile"}, "profile": gpu.profile.label}


def _transfer_gbps(stream: WgpuExecutable, size: int, device_s: float, roundtrip_ns: float) -> float:
    """Host <-> device copy rate of complete runs of ``stream`` (``size`` f32 in and out):
    best of 3 runs, less the device time and the fixed roundtrip. At least 0.01 GB/s."""
    feed = {"x0": np.random.default_rng(0).standard_normal(size).astype(np.float32)}
    best = min(_wall_ns(stream, feed) for _ in range(3))
    copy_ns = max(best - device_s * 1e9 - roundtrip_ns, best * 0.05, 1.0)
    return max(8.0 * size / copy_ns, 0.01)


def _wall_ns(exe: WgpuExecutable, feed: dict) -> float:
    start = time.perf_counter_ns()
    exe.run(feed)
    return float(time.perf_counter_ns() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx_wgpu.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="gpu", help="gpu, vulkan, opengl, directx or webgpu")
    parser.add_argument("--refresh", action="store_true", help="measure again even if a cached result exists")
    args = parser.parse_args(argv)
    print(json.dumps(calibrate(args.device, args.refresh, progress=lambda m: print(m, flush=True)), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

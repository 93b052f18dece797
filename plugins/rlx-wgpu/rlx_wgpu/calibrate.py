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

from pathlib import Path

import numpy as np

from rlx_core import CompileOptions, Graph
from rlx_core.runtime import registry
from rlx_core.select.tuning import (batch_seconds, cached_tuning, calibration_main, positive_figures, random_feeds,
                                    read_tuning, roundtrip_ns, tiny_graph, transfer_gbps, tuning_path)

from .codegen.linalg import TILES
from .encoder import Encoder
from .executable import WgpuExecutable
from .gpu import Gpu, open_gpu

__all__ = ["calibrate", "cache_path", "load_calibration", "device_seconds", "measure", "LARGE_TILES"]

KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")
LARGE_TILES = ("128x128x8/8x8", "128x128x16/8x8", "128x64x8/8x4", "64x64x16/4x4", "64x64x8/4x4")


def cache_path(gpu: Gpu) -> Path:
    return tuning_path(f"wgpu-calib-{gpu.profile.label}", gpu.info.get("device"), gpu.info.get("description"))


def _valid(data: dict) -> bool:
    # Files written before transfer and software were measured are stale.
    return positive_figures(data, KEYS) and isinstance(data.get("transfer_bw_gbps"), (int, float)) and \
        isinstance(data.get("software"), bool) and data.get("matmul_tile") in TILES


def load_calibration(gpu: Gpu) -> dict | None:
    """The cached calibration of ``gpu``, or None when there is none (or it is corrupt or
    stale)."""
    return read_tuning(cache_path(gpu), _valid)


def calibrate(label: str, refresh: bool = False, progress=print, matmul_size: int | None = None) -> dict:
    """Measure (or read from the cache) the device of profile ``label``. ``matmul_size``
    overrides the matmul's n (4096 on GPUs, 512 on CPU adapters)."""
    registry().backend(label)  # the probe: raises DeviceUnavailableError with the reason
    gpu = open_gpu(label)
    n = matmul_size or (512 if gpu.info.get("adapter_type") == "CPU" else 4096)
    gpu.tuning = cached_tuning(cache_path(gpu), _valid, lambda: measure(gpu, n, progress=progress), refresh)
    return gpu.tuning


def device_seconds(gpu: Gpu, exe: WgpuExecutable, min_seconds: float = 0.2) -> float:
    """Seconds per run of ``exe``'s device work (inputs already written): encode runs
    back to back in one submit, enough of them to take ``min_seconds``."""
    def run(repeats: int) -> None:
        ctx = Encoder(gpu)
        for _ in range(repeats):
            exe.encode(ctx)
        ctx.flush()
        gpu.sync()
    return batch_seconds(run, min_seconds, max_repeats=200)


def _compiled(gpu: Gpu, graph: Graph, **backend) -> WgpuExecutable:
    exe = WgpuExecutable(graph, CompileOptions(backend=backend), gpu, None)
    exe.run(random_feeds(graph))
    return exe


def measure(gpu: Gpu, n: int, tiles=LARGE_TILES, progress=print) -> dict:
    """Measure ``gpu`` now (no cache): an f32 ``n``^3 matmul with each of ``tiles`` (the
    fastest becomes ``matmul_tile``), memory bandwidth, roundtrip and transfer (see the
    module docstring for the keys)."""
    flops = 2.0 * n ** 3
    matmul = tiny_graph("calib-matmul", lambda g, a, b: g.matmul(a, b), (n, n), (n, n))
    measured = {}
    for tile in tiles:
        exe = _compiled(gpu, matmul, matmul_tile=tile)
        measured[tile] = flops / device_seconds(gpu, exe) / 1e9
        progress(f"calibrate {gpu.profile.label}: matmul {n}^3 tile {tile}: {measured[tile]:.0f} GFLOP/s")
        del exe
    best = max(measured, key=measured.get)
    size = min(16 * n * n, 1 << 26, gpu.max_binding_bytes // 4)  # at most 256 MiB in and out
    stream_graph = tiny_graph("calib-stream", lambda g, x: g.neg(x), (size,))
    stream = _compiled(gpu, stream_graph)
    bandwidth = 8.0 * size / device_seconds(gpu, stream) / 1e9
    tiny = _compiled(gpu, tiny_graph("calib-tiny", lambda g, x: g.neg(x), (1,)))
    roundtrip = roundtrip_ns(tiny, {"x0": np.zeros(1, np.float32)})
    progress(f"calibrate {gpu.profile.label}: memory {bandwidth:.1f} GB/s, roundtrip {roundtrip / 1e3:.0f} us")
    transfer = transfer_gbps(stream, random_feeds(stream_graph), 8.0 * size, device_seconds(gpu, stream), roundtrip)
    return {"sgemm_gflops": measured[best], "memory_bw_gbps": bandwidth, "roundtrip_overhead_ns": roundtrip,
            "transfer_bw_gbps": transfer, "matmul_tile": best, "matmul_size": n, "matmul_gflops_by_tile": measured,
            **{k: v for k, v in gpu.describe().items() if k != "profile"}, "profile": gpu.profile.label}


def main(argv=None) -> int:
    return calibration_main(argv, prog="python -m rlx_wgpu.calibrate", description=__doc__.splitlines()[0],
                            calibrate=calibrate, device=("gpu", "gpu, vulkan, opengl, directx or webgpu"))


if __name__ == "__main__":
    raise SystemExit(main())

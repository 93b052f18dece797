"""Calibration for the cost model: what one wgpu device really does.

* ``sgemm_gflops``: f32 matmul throughput (GFLOP/s) of the fastest matmul tile of
  :data:`LARGE_TILES` (those that fit the device's workgroup memory), timed on device work
  alone (many products in one submit, measured with the GPU's timestamps where it has
  them, see ``Encoder``), at 4096^3 on GPUs (512^3 on CPU adapters such as lavapipe).
  Each tile is timed ``TIMINGS`` times, then the best ``FINALISTS`` are timed
  ``TIMINGS`` times more, interleaved, together with the *incumbent* -- the tile this
  adapter's previous calibration kept, else the first of ``LARGE_TILES`` that fits. A
  tile's speed is its fastest timing: slow spells only add time (on the H200, timed on
  the host, every tile ran at a third to a half of its speed for a fresh machine's first
  minute and spells came and went later; the GPU's timestamps showed none of them), so
  the fastest timing is the one that repeats from one calibration to the next. The
  fastest finalist wins, but replaces the incumbent only when it is more than
  ``SWITCH_MARGIN`` faster, so that near-equal tiles trading places do not change it. The
  winner is kept as ``matmul_tile`` (``matmul_gflops_by_tile``: every tile's speed) and
  used for every large product on this adapter from then on. A cache from an older GEMM
  kernel or calibration (``matmul_kernel``) is measured again;
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

Results are cached per profile, adapter and driver in ``$XDG_CACHE_HOME/rlx`` (default
``~/.cache/rlx``) as ``wgpu-calib-<profile>-<adapter>-<driver>.json``, written atomically; a
missing or corrupt file is measured again. ``python -m rlx_wgpu.calibrate --device
vulkan [--refresh]`` prints the result as JSON; ``rlx calibrate --force`` measures again.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rlx_core import CompileOptions, Graph
from rlx_core.runtime import registry
from rlx_core.select.tuning import (batch_seconds, cached_tuning, calibration_main, positive_figures, random_feeds,
                                    read_tuning, roundtrip_ns, tiny_graph, transfer_gbps, tuning_path)

from rlx_core.errors import RlxError

from .codegen.linalg import parse_tile
from .encoder import Encoder
from .executable import WgpuExecutable
from .gpu import Gpu, is_software, open_gpu

__all__ = ["calibrate", "cache_path", "load_calibration", "device_seconds", "measure", "time_tiles", "LARGE_TILES",
           "MATMUL_KERNEL", "SWITCH_MARGIN"]

KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")
LARGE_TILES = ("128x128x16/8x8/db", "128x128x16/8x8/db/w8", "128x128x16/8x8/db/p", "128x128x8/8x8/db",
               "128x128x8/8x8/db/w8", "128x128x8/8x8/db/p", "128x64x16/8x4/db", "64x128x16/4x8/db",
               "64x64x16/4x4/db", "128x128x16/8x8", "128x128x8/8x8", "128x128x32/8x8", "128x128x16/8x8/w8",
               "256x128x16/16x8")
MATMUL_KERNEL = 4  # version of the GEMM kernel's code generation and calibration: another one's cache is stale
TIMINGS = 3        # timings per tile in each pass
FINALISTS = 3      # tiles timed again in the second pass (and the incumbent)
SWITCH_MARGIN = 0.05  # how much faster than the incumbent a tile must be to replace it


def cache_path(gpu: Gpu) -> Path:
    return tuning_path(f"wgpu-calib-{gpu.profile.label}", gpu.info.get("device"), gpu.info.get("description"))


def _valid(data: dict) -> bool:
    # Files written before transfer and software were measured, or by another GEMM kernel, are stale.
    return positive_figures(data, KEYS) and isinstance(data.get("transfer_bw_gbps"), (int, float)) and \
        isinstance(data.get("software"), bool) and data.get("matmul_kernel") == MATMUL_KERNEL and \
        _parses(data.get("matmul_tile"))


def _parses(tile) -> bool:
    try:
        parse_tile(tile)
        return True
    except RlxError:
        return False


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

    def measured() -> dict:
        previous = load_calibration(gpu)
        return measure(gpu, n, progress=progress, incumbent=previous and previous["matmul_tile"])
    gpu.tuning = cached_tuning(cache_path(gpu), _valid, measured, refresh)
    return gpu.tuning


def device_seconds(gpu: Gpu, exe: WgpuExecutable, min_seconds: float = 0.2) -> float:
    """Seconds per run of ``exe``'s device work (inputs already written): encode runs
    back to back in one submit, enough of them to take ``min_seconds``; timed with GPU
    timestamps where the device has them (``Encoder``'s ``timed``), else on the host."""
    def run(repeats: int) -> float | None:
        ctx = Encoder(gpu, timed=True)
        for _ in range(repeats):
            exe.encode(ctx)
        ctx.flush()
        gpu.sync()
        return ctx.device_seconds()
    return batch_seconds(run, min_seconds, max_repeats=200)


def _compiled(gpu: Gpu, graph: Graph, **backend) -> WgpuExecutable:
    exe = WgpuExecutable(graph, CompileOptions(backend=backend), gpu, None)
    exe.run(random_feeds(graph))
    return exe


def time_tiles(gpu: Gpu, exes: dict, rounds: int, min_seconds: float | None = None) -> dict[str, list[float]]:
    """Seconds per run of each executable in ``exes`` (name -> executable), ``rounds`` times
    each, interleaved: every round times every executable once, in batches of at least
    ``min_seconds`` (default 0.2 s; 0.05 s on a software adapter, which runs at CPU speed)."""
    if min_seconds is None:
        min_seconds = 0.05 if is_software(gpu.info) else 0.2
    seconds = {name: [] for name in exes}
    for _ in range(rounds):
        for name, exe in exes.items():
            seconds[name].append(device_seconds(gpu, exe, min_seconds))
    return seconds


def measure(gpu: Gpu, n: int, tiles=LARGE_TILES, progress=print, timings: int = TIMINGS,
            incumbent: str | None = None) -> dict:
    """Measure ``gpu`` now (no cache): an f32 ``n``^3 matmul with each of ``tiles`` that fits
    the device (the fastest by ``SWITCH_MARGIN`` over ``incumbent`` becomes ``matmul_tile``;
    see the module docstring for the two passes), memory bandwidth, roundtrip and transfer
    (see the module docstring for the keys)."""
    flops = 2.0 * n ** 3
    matmul = tiny_graph("calib-matmul", lambda g, a, b: g.matmul(a, b), (n, n), (n, n))
    fitting = [t for t in tiles if parse_tile(t).workgroup_bytes <= gpu.workgroup_bytes]
    if not fitting:
        raise RlxError(f"no matmul tile of {list(tiles)} fits this device's {gpu.workgroup_bytes} bytes of "
                       f"workgroup memory")
    seconds: dict[str, list[float]] = {}
    for tile in fitting:
        seconds.update(time_tiles(gpu, {tile: _compiled(gpu, matmul, matmul_tile=tile)}, timings))
        progress(f"calibrate {gpu.profile.label}: matmul {n}^3 tile {tile}: "
                 f"{flops / min(seconds[tile]) / 1e9:.0f} GFLOP/s (fastest of {timings})")
    incumbent = incumbent if incumbent in fitting else fitting[0]
    finalists = sorted(fitting, key=lambda t: min(seconds[t]))[:FINALISTS]
    finalists += [incumbent] if incumbent not in finalists else []
    if len(finalists) > 1:
        again = time_tiles(gpu, {t: _compiled(gpu, matmul, matmul_tile=t) for t in finalists}, timings)
        for tile in finalists:
            seconds[tile] += again[tile]
            progress(f"calibrate {gpu.profile.label}: finalist {tile}: "
                     f"{flops / min(seconds[tile]) / 1e9:.0f} GFLOP/s (fastest of {len(seconds[tile])})")
    measured = {t: flops / min(s) / 1e9 for t, s in seconds.items()}
    best = max(finalists, key=measured.get)  # of the tiles timed in both passes
    if measured[best] <= measured[incumbent] * (1 + SWITCH_MARGIN):
        best = incumbent
    size = min(16 * n * n, 1 << 26, gpu.max_binding_bytes // 4)  # at most 256 MiB in and out
    stream_graph = tiny_graph("calib-stream", lambda g, x: g.neg(x), (size,))
    stream = _compiled(gpu, stream_graph)
    bandwidth = 8.0 * size / min(device_seconds(gpu, stream) for _ in range(TIMINGS)) / 1e9  # fastest, as for tiles
    tiny = _compiled(gpu, tiny_graph("calib-tiny", lambda g, x: g.neg(x), (1,)))
    roundtrip = roundtrip_ns(tiny, {"x0": np.zeros(1, np.float32)})
    progress(f"calibrate {gpu.profile.label}: memory {bandwidth:.1f} GB/s, roundtrip {roundtrip / 1e3:.0f} us")
    transfer = transfer_gbps(stream, random_feeds(stream_graph), 8.0 * size, device_seconds(gpu, stream), roundtrip)
    return {"sgemm_gflops": measured[best], "memory_bw_gbps": bandwidth, "roundtrip_overhead_ns": roundtrip,
            "transfer_bw_gbps": transfer, "matmul_tile": best, "matmul_incumbent": incumbent, "matmul_size": n,
            "matmul_gflops_by_tile": measured,
            "matmul_kernel": MATMUL_KERNEL, "matmul_timings": {t: len(s) for t, s in seconds.items()},
            **{k: v for k, v in gpu.describe().items() if k != "profile"}, "profile": gpu.profile.label}


def main(argv=None) -> int:
    return calibration_main(argv, prog="python -m rlx_wgpu.calibrate", description=__doc__.splitlines()[0],
                            calibrate=calibrate, device=("gpu", "gpu, vulkan, opengl, directx or webgpu"))


if __name__ == "__main__":
    raise SystemExit(main())

"""wgpu backend: f32 matmul throughput against cuBLAS SGEMM (through CuPy), in one run.

    python benchmarks/wgpu_matmul.py [--device vulkan] [--n 4096] [--rounds 5] [--out benchmarks/results/wgpu_h200.json]

RLX compiles one n x n x n f32 matmul for the wgpu device with the plugin's own choice
(the calibrated tile when a calibration exists) and with each tile of
``rlx_wgpu.calibrate.LARGE_TILES`` that fits the device, checks each product against
cuBLAS's (numpy's where there is no CUDA), and times the device work alone: many
products encoded into one submit (``rlx_wgpu.calibrate.device_seconds``), measured with
GPU timestamps where the adapter has them (else the wall time of the submit and its
wait). ``--rounds`` rounds, interleaved: each round times the peer -- cuBLAS on the same
machine and data with TF32 off (``CUPY_TF32=0``), with CUDA events -- and then every
variant once, so that drift hits them alike. The table shows each variant's fastest
round, the spread (slowest / fastest round) and "vs peer": the median over rounds of the
variant's speed over the peer's in the same round. On the H200 the wall time of the same
batches varied up to twofold (the driver's submission and the host's wake-up), while the
GPU timestamps repeat to 0.1%. Without CuPy and a CUDA GPU the comparison is numpy's
BLAS on the host. Writes the JSON named by ``--out`` (and a Markdown table beside it) and
prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

from common import cublas_sgemm, numpy_matmul, write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins" / "rlx-wgpu")]  # a checkout where the plugin is not installed


def _session(device: str):
    from rlx_core import Session
    from rlx_core.runtime import register_backends, registry
    from rlx_wgpu import plugin
    if not registry().entries.get(device):
        register_backends(plugin)
    return Session(device)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="gpu")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5, help="timings per variant (the fastest shown)")
    parser.add_argument("--out", default=None,
                        help="JSON file to write (default: benchmarks/results/wgpu_<device>.json)")
    args = parser.parse_args(argv)

    import wgpu
    from rlx_core import CompileOptions, Graph
    from rlx_wgpu.calibrate import LARGE_TILES, time_tiles
    from rlx_wgpu.codegen.linalg import parse_tile, pick_tile

    session = _session(args.device)
    gpu = session.backend.gpu
    n = args.n
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    peer = cublas_sgemm(a, b)
    peer_name = "cuBLAS SGEMM (CuPy, TF32 off)" if peer else "numpy (host BLAS)"
    timed_peer = cublas_sgemm if peer else numpy_matmul
    _, want = peer or numpy_matmul(a, b)
    g = Graph("matmul")
    g.set_outputs([g.matmul(g.input("a", (n, n)), g.input("b", (n, n)))])
    default = f"default ({pick_tile(n, n, None, gpu.tuned_matmul_tile(), gpu.workgroup_bytes)})"
    tiles = [t for t in LARGE_TILES if parse_tile(t).workgroup_bytes <= gpu.workgroup_bytes]
    compiled, errors = {}, {}
    for label in [default, *tiles]:
        c = session.compile(g, CompileOptions(backend={} if label == default else {"matmul_tile": label}))
        got = c.run({"a": a, "b": b})[0]
        errors[label] = float(np.abs(got - want).max() / np.abs(want).max())
        compiled[label] = c
    exes = {label: c.executable for label, c in compiled.items()}
    seconds, peer_by_round = {label: [] for label in exes}, []
    for _ in range(args.rounds):
        peer_by_round.append(timed_peer(a, b)[0])
        for label, times in time_tiles(gpu, exes, 1, min_seconds=0.3).items():
            seconds[label] += times
    rows = []
    for label, times in seconds.items():
        gflops = [2.0 * n ** 3 / t / 1e9 for t in times]
        rows.append({"tile": label, "gflops": max(gflops), "spread": max(times) / min(times),
                     "vs_peer": statistics.median(g / p for g, p in zip(gflops, peer_by_round)),
                     "max_rel_error": errors[label]})
        print(f"rlx wgpu {label}: {rows[-1]['gflops']:.0f} GFLOP/s (fastest of {len(times)}, spread "
              f"{rows[-1]['spread']:.2f}x, {rows[-1]['vs_peer']:.0%} of the peer, rel. error {errors[label]:.1e})",
              flush=True)
    del compiled, exes
    best = max(rows, key=lambda r: r["gflops"])
    default = rows[0]
    result = {
        "benchmark": f"f32 matmul {n}x{n}x{n}", "date": datetime.date.today().isoformat(),
        "device": args.device, "adapter": gpu.describe(), "wgpu": wgpu.__version__, "host": platform.node(),
        "rlx": rows, "rlx_best": best, "peer": peer_name, "peer_gflops": max(peer_by_round),
        "peer_gflops_by_round": peer_by_round, "ratio_default": default["vs_peer"], "ratio_best": best["vs_peer"],
        "timed_with": "GPU timestamps" if gpu.timestamp_period is not None else "host wall time",
        "timing": f"{args.rounds} interleaved rounds, each timing the peer and then every tile once; RLX: device "
                  "work only, products encoded back to back into one submit, "
                  + ("GPU timestamps" if gpu.timestamp_period is not None else "wall time of submit and wait")
                  + " (fastest round shown); "
                  + ("cuBLAS: CUDA events around 20 products" if peer else "numpy: fastest of 5 host products")
                  + " (fastest round shown); vs peer: median over rounds of the tile's speed over the peer's "
                    "in the same round",
    }
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"wgpu_{args.device}.json")
    table = _table(result)
    write_results(out, result, table)
    print(table)
    return 0


def _table(r: dict) -> str:
    lines = [f"# {r['benchmark']} on {r['adapter']['adapter']} ({r['adapter']['backend_type']}, "
             f"{r['adapter']['driver']}), {r['date']}", "",
             "| implementation | GFLOP/s | vs peer | spread | max rel. error |", "|---|---|---|---|---|"]
    lines += [f"| RLX wgpu, tile {row['tile']} | {row['gflops']:.0f} | {row['vs_peer']:.0%} | "
              f"{row['spread']:.2f}x | {row['max_rel_error']:.1e} |" for row in r["rlx"]]
    lines += [f"| {r['peer']} | {r['peer_gflops']:.0f} | 100% | | |", "",
              f"Timing: {r['timing']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

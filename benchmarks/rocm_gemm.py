"""rlx-rocm: f32 GEMM throughput of the generated OpenCL kernel against numpy's BLAS (and
cuBLAS SGEMM through CuPy where there is a CUDA GPU), in one run.

    python benchmarks/rocm_gemm.py [--size 1024] [--platform Portable] [--out benchmarks/results/rocm_pocl.json]

RLX compiles one n x n x n f32 matmul for the ``rocm`` device with each GEMM tile the
calibration tries on this kind of device, and with the plugin's own choice (the
calibrated tile where a calibration exists), checks each product against numpy's, and
times the device work alone: products enqueued back to back, one wait
(``rlx_rocm.calibrate.device_seconds``). numpy's BLAS runs on the host, on the same data,
best of 5. cuBLAS (``CUPY_TF32=0``: plain f32) is timed with CUDA events when CuPy finds a
GPU. ``--platform`` sets ``RLX_ROCM_OPENCL_PLATFORM`` (a stand-in platform such as PoCL or
NVIDIA's OpenCL) when no AMD GPU is present. Writes the JSON named by ``--out`` (default
``benchmarks/results/rocm_<device>.json``) and a Markdown table beside it, and prints the table.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from common import cublas_sgemm, numpy_matmul, write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins" / "rlx-rocm")]  # a checkout where the plugin is not installed


def _session():
    from rlx_core import Session
    from rlx_core.runtime import register_backends, registry
    from rlx_rocm import plugin
    if not registry().entries.get("rocm"):
        register_backends(plugin)
    return Session("rocm")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="n of the n x n x n product (default 1024)")
    parser.add_argument("--platform", default=None, help="RLX_ROCM_OPENCL_PLATFORM for this run")
    parser.add_argument("--out", default=None, help="JSON file to write (default benchmarks/results/rocm_<device>.json)")
    args = parser.parse_args(argv)
    if args.platform:
        os.environ["RLX_ROCM_OPENCL_PLATFORM"] = args.platform

    from rlx_core import CompileOptions, Graph
    from rlx_rocm.calibrate import CPU_TILES, GPU_TILES, device_seconds

    session = _session()
    dev = session.backend.dev
    n = args.size
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    numpy_gflops, want = numpy_matmul(a, b)
    print(f"numpy {np.__version__} (host BLAS): {numpy_gflops:.1f} GFLOP/s", flush=True)
    cublas = cublas_sgemm(a, b)
    if cublas:
        print(f"cuBLAS SGEMM (CuPy, TF32 off): {cublas[0]:.0f} GFLOP/s", flush=True)
    g = Graph("matmul")
    g.set_outputs([g.matmul(g.input("a", (n, n)), g.input("b", (n, n)))])
    rows = []
    for tile in [None, *(CPU_TILES if dev.software else GPU_TILES)]:
        start = time.perf_counter()
        c = session.compile(g, CompileOptions(backend={"gemm_tile": tile} if tile else {}))
        compile_s = time.perf_counter() - start
        got = c.run({"a": a, "b": b})[0]
        error = float(np.abs(got - want).max() / np.abs(want).max())
        seconds = device_seconds(c.executable, min_seconds=0.5)
        label = tile or f"default ({dev.tuning.get('gemm_tile') or 'by size, uncalibrated'})"
        rows.append({"tile": label, "gflops": 2.0 * n ** 3 / seconds / 1e9, "max_rel_error": error,
                     "compile_s": round(compile_s, 2)})
        print(f"rlx rocm {label}: {rows[-1]['gflops']:.1f} GFLOP/s (rel. error {error:.1e}, "
              f"compile {compile_s:.1f} s)", flush=True)
        del c
    best = max(rows, key=lambda r: r["gflops"])
    result = {
        "benchmark": f"f32 matmul {n}x{n}x{n}", "date": datetime.date.today().isoformat(),
        "device": dev.describe(), "host": platform.node(), "numpy": np.__version__,
        "rlx": rows, "rlx_best": best, "numpy_gflops": numpy_gflops,
        "ratio_vs_numpy_default": rows[0]["gflops"] / numpy_gflops, "ratio_vs_numpy_best": best["gflops"] / numpy_gflops,
        "cublas_gflops": cublas[0] if cublas else None,
        "ratio_vs_cublas_default": rows[0]["gflops"] / cublas[0] if cublas else None,
        "ratio_vs_cublas_best": best["gflops"] / cublas[0] if cublas else None,
        "timing": "device work only: products enqueued back to back, one wait (RLX); fastest of 5 host products "
                  "(numpy)" + ("; CUDA events around 20 products (cuBLAS)" if cublas else ""),
    }
    tag = "pocl" if "Portable" in dev.info["platform"] else re.sub(r"[^a-z0-9]+", "_", dev.info["device"].lower())
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"rocm_{tag.strip('_')}.json")
    table = _table(result)
    write_results(out, result, table)
    print(table)
    return 0


def _table(r: dict) -> str:
    d = r["device"]
    kind = "software, OpenCL on the host CPU" if d["software"] else "GPU"
    stand_in = ", a stand-in for an AMD GPU" if d["stand_in"] else ""
    lines = [f"# {r['benchmark']} on {d['device']} ({d['platform']}, driver {d['driver']}; {kind}{stand_in}), "
             f"{r['date']}", "",
             "| implementation | GFLOP/s | vs numpy | vs cuBLAS | max rel. error | compile s |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in r["rlx"]:
        vs_cublas = f"{row['gflops'] / r['cublas_gflops']:.0%}" if r["cublas_gflops"] else "-"
        lines.append(f"| RLX rocm, tile {row['tile']} | {row['gflops']:.1f} | {row['gflops'] / r['numpy_gflops']:.2f}x "
                     f"| {vs_cublas} | {row['max_rel_error']:.1e} | {row['compile_s']} |")
    lines.append(f"| numpy {r['numpy']} (host BLAS) | {r['numpy_gflops']:.1f} | 1.00x | - | | |")
    if r["cublas_gflops"]:
        lines.append(f"| cuBLAS SGEMM (CuPy, TF32 off) | {r['cublas_gflops']:.0f} | | 100% | | |")
    lines += ["", f"Timing: {r['timing']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

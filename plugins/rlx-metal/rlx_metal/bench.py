"""The rlx-metal benchmark, for a Mac (``bash plugins/rlx-metal/mac_check.sh`` runs it):

    python -m rlx_metal.bench [--n 2048] [--quick] [--out benchmarks/results/metal_mac]

* f32 matmul ``n``^3 on ``metal``: device time of rlx-wgpu's WGSL kernel with the
  calibrated tile (many products in one submit) and a whole ``run`` (inputs in, product
  out); MPS GEMM through pyobjc where it is installed; numpy's BLAS (Accelerate on macOS)
  as the host peer. Every product is checked against numpy's.
* a transformer encoder block (``rlx_core.models.transformer_block``) on ``cpu``,
  ``metal`` and ``ane`` (f32, and f16 -- what the Neural Engine computes in): median
  wall time of ``run`` and the largest error against the reference interpreter.

Devices that are unavailable get a row saying why. Writes ``<out>.md`` and ``<out>.json``
and prints the table. Off macOS it runs only with ``RLX_METAL_ADAPTER_BACKEND=vulkan``
(the test aid), and the table says that the ``metal`` rows are not Metal.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from rlx_core import Session, models
from rlx_core.reference import evaluate
from rlx_core.runtime import registry

__all__ = ["run_benchmark", "main"]


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up (the first run of an ane model also loads it)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def _rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def _matmul_rows(n: int, repeats: int) -> list[dict]:
    from rlx_core import Graph
    from rlx_wgpu import api

    from . import mps
    rows = []
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    want = a @ b
    flops = 2.0 * n ** 3
    seconds = min(_median_ms(lambda: a @ b, repeats) for _ in range(1)) / 1e3
    rows.append({"what": f"f32 matmul {n}^3", "device": "host", "engine": "numpy (BLAS)",
                 "gflops": flops / seconds / 1e9, "rel_err": 0.0})
    avail = registry().entry("metal").availability()
    if not avail.ok:
        rows.append({"what": f"f32 matmul {n}^3", "device": "metal", "engine": "-", "note": avail.reason})
        return rows
    g = Graph("bench-matmul")
    x, y = g.input("a", (n, n)), g.input("b", (n, n))
    g.set_outputs([g.matmul(x, y)])
    compiled = Session("metal").compile(g)
    gpu = registry().backend("metal").gpu
    got = compiled.run({"a": a, "b": b})[0]
    note = "TEST AID: not Metal" if avail.detail.get("test_aid") else ""
    device_s = api.device_seconds(gpu, compiled.executable)
    tile = api.pick_tile(n, n, tuned=gpu.tuned_matmul_tile())
    rows.append({"what": f"f32 matmul {n}^3", "device": "metal", "engine": f"WGSL tile {tile}",
                 "gflops": flops / device_s / 1e9, "rel_err": _rel_err(got, want), "note": note + " (device time)"})
    run_ms = _median_ms(lambda: compiled.run({"a": a, "b": b}), repeats)
    rows.append({"what": f"f32 matmul {n}^3", "device": "metal", "engine": "WGSL, whole run",
                 "gflops": flops / run_ms * 1e3 / 1e9, "rel_err": _rel_err(got, want),
                 "note": note + f" (unified memory: {gpu.unified_memory})"})
    usable, reason = mps.available()
    if usable:
        product = mps.engine().gemm(a[None], b[None])[0]
        rows.append({"what": f"f32 matmul {n}^3", "device": "metal", "engine": "MPS (copies included)",
                     "gflops": mps.measure(n), "rel_err": _rel_err(product, want)})
    else:
        rows.append({"what": f"f32 matmul {n}^3", "device": "metal", "engine": "MPS", "note": reason})
    return rows


def _block_rows(quick: bool, repeats: int) -> list[dict]:
    rows = []
    size = dict(batch=1, seq=32, d_model=64, heads=4, ffn=128) if quick else \
        dict(batch=1, seq=128, d_model=256, heads=4, ffn=1024)
    what = f"encoder block s{size['seq']} d{size['d_model']}"
    for dtype in ("f32", "f16"):
        g, params = models.transformer_block(dtype=dtype, **size)
        inputs = models.example_inputs(g)
        expected = evaluate(g, inputs, params)[0]
        for device in ("cpu", "metal", "ane"):
            entry = registry().entry(device) if registry().entries.get(device) else None
            avail = entry.availability() if entry is not None else None
            if avail is None or not avail.ok:
                rows.append({"what": f"{what} {dtype}", "device": device, "engine": "-",
                             "note": avail.reason if avail is not None else "no plugin serves it here"})
                continue
            try:
                compiled = Session(device).compile(g)
                compiled.set_params(params)
                got = compiled.run(inputs)[0]
                ms = _median_ms(lambda: compiled.run(inputs), repeats)
            except Exception as e:  # a device that cannot take this graph: say why
                rows.append({"what": f"{what} {dtype}", "device": device, "engine": "-",
                             "note": f"{type(e).__name__}: {str(e)[:160]}"})
                continue
            note = "TEST AID: not Metal" if avail.detail.get("test_aid") else ""
            engine = getattr(compiled.executable, "units", "") or str(compiled.backend)
            rows.append({"what": f"{what} {dtype}", "device": device, "engine": engine, "ms": ms,
                         "rel_err": _rel_err(got, expected), "note": note})
    return rows


def run_benchmark(n: int = 2048, quick: bool = False, repeats: int = 10) -> dict:
    rows = _matmul_rows(256 if quick else n, 3 if quick else repeats) + _block_rows(quick, 3 if quick else repeats)
    return {"date": datetime.date.today().isoformat(), "machine": platform.platform(),
            "processor": platform.processor() or platform.machine(), "python": sys.version.split()[0],
            "rows": rows}


def to_markdown(result: dict) -> str:
    lines = [f"# rlx-metal benchmark on {result['machine']} ({result['processor']}), {result['date']}", "",
             "| workload | device | engine | GFLOP/s | ms | max rel. error | note |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        gflops = f"{r['gflops']:.0f}" if "gflops" in r else ""
        ms = f"{r['ms']:.3f}" if "ms" in r else ""
        err = f"{r['rel_err']:.1e}" if "rel_err" in r else ""
        lines.append(f"| {r['what']} | {r['device']} | {r['engine']} | {gflops} | {ms} | {err} | "
                     f"{r.get('note', '').strip()} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlx_metal.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048, help="matmul size (default 2048)")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke test)")
    parser.add_argument("--out", default=None, help="write <out>.md and <out>.json")
    args = parser.parse_args(argv)
    result = run_benchmark(args.n, args.quick)
    table = to_markdown(result)
    print(table)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=2))
        out.with_suffix(".md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""rlx-rocm on torch-exported ONNX models: outputs against onnxruntime, and run times.

    python benchmarks/rocm_onnx.py [--platform Portable] [--out benchmarks/results/rocm_onnx_pocl.json]

The models are ``benchmarks/pick_accuracy.py``'s (two MLPs, a CNN, a transformer encoder
layer, a GPT-2 block; torch modules with seeded weights exported with the TorchScript
exporter), imported as ``rlx run`` imports them. Each runs on the ``rocm`` device and on
onnxruntime's CPU provider with the same inputs; the largest absolute difference, relative
to the largest output magnitude, must be <= 1e-4 (the issue's target). Run times are
medians of complete ``run`` calls (inputs in, outputs back). ``--platform`` sets
``RLX_ROCM_OPENCL_PLATFORM`` where no AMD GPU is present. Writes JSON (``--out``, default
``benchmarks/results/rocm_onnx_<device>.json``) and a Markdown table beside it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins" / "rlx-rocm"), str(ROOT / "benchmarks")]
from common import write_results  # noqa: E402
TARGET = 1e-4


def _median_ms(fn, runs: int = 20, budget_s: float = 5.0) -> float:
    fn()
    times, start = [], time.perf_counter()
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget_s:
            break
    return float(np.median(times)) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", default=None, help="RLX_ROCM_OPENCL_PLATFORM for this run")
    parser.add_argument("--out", default=None)
    parser.add_argument("--models", default=None, help="comma-separated subset of the models")
    args = parser.parse_args(argv)
    if args.platform:
        os.environ["RLX_ROCM_OPENCL_PLATFORM"] = args.platform

    import onnxruntime as ort
    from pick_accuracy import ONNX_MODELS, export_onnx_models, load_case
    from rlx_core import Session
    from rlx_core.runtime import register_backends, registry
    from rlx_rocm import plugin
    if not registry().entries.get("rocm"):
        register_backends(plugin)
    session = Session("rocm")
    dev = session.backend.dev
    names = args.models.split(",") if args.models else list(ONNX_MODELS)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, path in export_onnx_models(names, Path(folder)):
            graph, inputs, params = load_case(path)
            print(f"{name}: compiling and running", flush=True)  # where a crash happened, if one does
            start = time.perf_counter()
            compiled = session.compile(graph)
            compile_s = time.perf_counter() - start
            compiled.set_params(params)
            got = [np.asarray(o) for o in compiled.run(inputs)]
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            want = sess.run(None, inputs)
            err = max(float(np.abs(g.astype(np.float64) - w).max() / max(np.abs(w).max(), 1e-30))
                      for g, w in zip(got, want))
            row = {"model": name, "max_rel_error": err, "ok": err <= TARGET, "compile_s": round(compile_s, 2),
                   "rlx_ms": _median_ms(lambda: compiled.run(inputs)),
                   "onnxruntime_ms": _median_ms(lambda: sess.run(None, inputs))}
            rows.append(row)
            print(f"{name}: rel. error {err:.1e} ({'ok' if row['ok'] else 'ABOVE 1e-4'}), rlx {row['rlx_ms']:.2f} ms, "
                  f"onnxruntime {row['onnxruntime_ms']:.2f} ms, compile {compile_s:.1f} s", flush=True)
    result = {"benchmark": "torch-exported ONNX models on rocm vs onnxruntime (CPU)",
              "date": datetime.date.today().isoformat(), "device": dev.describe(), "target": TARGET, "rows": rows,
              "all_ok": all(r["ok"] for r in rows)}
    tag = "pocl" if "Portable" in dev.info["platform"] else re.sub(r"[^a-z0-9]+", "_", dev.info["device"].lower())
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"rocm_onnx_{tag.strip('_')}.json")
    d = dev.describe()
    lines = [f"# torch-exported ONNX models on rocm ({d['device']}, {d['platform']}"
             f"{', software' if d['software'] else ''}{', stand-in' if d['stand_in'] else ''}) vs onnxruntime, "
             f"{result['date']}", "",
             "| model | max rel. error | <= 1e-4 | rlx rocm ms | onnxruntime ms | compile s |", "|---|---:|---|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['max_rel_error']:.1e} | {'yes' if r['ok'] else 'no'} | {r['rlx_ms']:.2f} | "
              f"{r['onnxruntime_ms']:.2f} | {r['compile_s']} |" for r in rows]
    lines += ["", "Error: largest |rlx - onnxruntime| over the largest |onnxruntime| output. Times: medians of "
                  "complete runs (inputs in, outputs back).", ""]
    write_results(out, result, "\n".join(lines))
    print("\n".join(lines))
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The async command stream: N submits back to back against N sequential runs.

    python benchmarks/stream_bench.py                        # every device available here
    RLX_TPU_PLATFORM=gpu python benchmarks/stream_bench.py --devices cuda,tpu   # the H200

The workload is the b1 transformer block (``rlx_core.models.transformer_block``: batch 1,
seq 128, d_model 256, 4 heads, ffn 1024, f32; ``--seq``/``--d-model`` change it), host
numpy in and out, the input buffer rewritten before every call as a serving loop does:

* ``sequential``: ``run(x)`` N times (each waits for its result);
* ``pipelined``: ``submit(x)`` N times, then ``wait()`` on every handle; the median
  time one ``submit`` takes to return is reported too (a queueing backend's submit
  costs host time only: it must not wait for the device).

Each round times one batch of each, in a shuffled order (``common.interleaved_times``),
so load on a shared machine falls on both alike; the speedup is the median over rounds
of sequential / pipelined time (throughput ratio). Results of both are checked equal
first. Target (issue 19): >= 1.3x on the H200 for cuda and tpu. A device without the
``async_pipeline`` capability (cpu) runs submits synchronously: its ratio is ~1.0 and
shows what the handle costs. Results: ``benchmarks/results/stream_<host>.json`` / ``.md``
(``--output`` to change).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_device_bench_args, interleaved_times, markdown_table, paired_ratio, per_device,  # noqa: E402
                    report_per_device, use_checkout)

use_checkout()

import numpy as np  # noqa: E402

from rlx_core import Session  # noqa: E402
from rlx_core.models import example_inputs, transformer_block  # noqa: E402

DEVICES = ("cpu", "cuda", "tpu", "gpu", "mlx", "rocm")
TARGET = 1.3  # pipelined / sequential throughput on the H200 (cuda, tpu)


def bench_device(device: str, args) -> dict:
    graph, params = transformer_block(batch=1, seq=args.seq, d_model=args.d_model)
    compiled = Session(device).compile(graph)
    compiled.set_params(params)
    xs = [example_inputs(graph, seed=i)["x"] for i in range(args.n)]
    buf = np.empty_like(xs[0])

    def sequential():
        outs = []
        for x in xs:
            buf[...] = x
            outs.append(compiled.run({"x": buf})[0])
        return outs

    submit_s = []  # how long each submit took to return (host time; no wait for the device)

    def pipelined():
        handles = []
        for x in xs:
            buf[...] = x
            t0 = time.perf_counter()
            handles.append(compiled.submit({"x": buf}))
            submit_s.append(time.perf_counter() - t0)
        return [h.wait()[0] for h in handles]

    for a, b in zip(sequential(), pipelined()):  # same results (also the warm-up)
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-4)
    times = interleaved_times({"sequential": sequential, "pipelined": pipelined}, args.rounds, warmup=2)
    seq_ms, pipe_ms = (statistics.median(times[k]) / args.n * 1e3 for k in ("sequential", "pipelined"))
    return {"device": device, "backend": compiled.backend, "async_pipeline": "async_pipeline" in compiled.capabilities,
            "n": args.n, "rounds": args.rounds, "sequential_ms_per_run": round(seq_ms, 4),
            "pipelined_ms_per_run": round(pipe_ms, 4), "submit_return_ms": round(1e3 * statistics.median(submit_s), 4),
            "speedup": round(paired_ratio(times["sequential"], times["pipelined"]), 3), "graph": graph.name}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_bench_args(p, DEVICES, rounds=20, results="stream")
    p.add_argument("--n", type=int, default=16, help="runs per batch (submits back to back)")
    args = p.parse_args(argv)
    rows, skipped = per_device(args.devices, lambda device: bench_device(device, args), "stream_bench")
    for r in rows:
        r["meets_target"] = r["speedup"] >= TARGET if r["device"] in ("cuda", "tpu") else None
    table = markdown_table(
        ["device", "backend", "async_pipeline", "sequential ms/run", "pipelined ms/run", "speedup",
         "submit returns after ms"],
        [(r["device"], r["backend"], r["async_pipeline"], r["sequential_ms_per_run"], r["pipelined_ms_per_run"],
          f"{r['speedup']:.2f}x", r["submit_return_ms"]) for r in rows])
    text = (f"N={args.n} submits back to back vs N sequential runs, b1 transformer block "
            f"(seq {args.seq}, d_model {args.d_model}), median of {args.rounds} interleaved rounds; "
            f"target >= {TARGET}x on the H200 (cuda, tpu).\n\n" + table)
    report_per_device("stream", args.output, text, rows, skipped, target=TARGET)
    return 0 if not any(r["meets_target"] is False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

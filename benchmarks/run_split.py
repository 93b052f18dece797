"""Run-path split: a full ``run()`` with numpy in and out against the device's execution alone.

    python benchmarks/run_split.py                                           # every device here
    RLX_TPU_PLATFORM=gpu python benchmarks/run_split.py --devices tpu,gpu    # the H200: XLA:GPU, Vulkan

Issue 18 measured rlx-cuda's ``run()`` at 3x its CUDA-graph replay and asked for the same
split on rlx-tpu and rlx-wgpu. The workload is the b1 transformer block of
``stream_bench.py`` (``rlx_core.models.transformer_block``: batch 1, seq 128, d_model 256;
``--seq``/``--d-model`` change it). Each round times, in a shuffled order
(``common.interleaved_times``), one call of:

* ``run``: ``compiled.run({"x": numpy})`` -> numpy outputs, everything a caller pays;
* ``device``: the compiled work alone on inputs already on the device, waited for --
  tpu: ``TpuExecutable.launch`` of the XLA program on a JAX array; wgpu: every step
  encoded into one command buffer over the arena as the last run left it, submitted
  and waited for (``Encoder`` + ``WgpuExecutable.encode``: no input writes, no readback);
* tpu also ``run_device_arrays``: ``run`` of a JAX array with ``outputs="jax"``,
  waited (the checks and dispatch of ``run`` without the transfers).

``split`` is the median over rounds of ``run / device``; ``host_us`` the median of
``run - device`` (what the host path adds per call). Results:
``benchmarks/results/run_split_<host>.json`` / ``.md`` (``--output`` to change).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (add_device_bench_args, interleaved_times, markdown_table, paired_ratio, per_device,  # noqa: E402
                    report_per_device, use_checkout)

use_checkout()

import numpy as np  # noqa: E402

from rlx_core import CompileOptions, Session  # noqa: E402
from rlx_core.models import example_inputs, transformer_block  # noqa: E402

DEVICES = ("tpu", "gpu")


def _tpu_contenders(graph, params, x: np.ndarray, compiled) -> dict:
    import jax
    on_device = Session("tpu").compile(graph, CompileOptions(backend={"outputs": "jax"}))
    on_device.set_params(params)
    x_dev = jax.device_put(x, on_device.executable.program.input_shardings[0])
    launch = on_device.executable.launch
    return {"device": lambda: jax.block_until_ready(launch((x_dev,))),
            "run_device_arrays": lambda: jax.block_until_ready(list(on_device.run({"x": x_dev})))}


def _wgpu_contenders(graph, params, x: np.ndarray, compiled) -> dict:
    from rlx_wgpu.encoder import Encoder
    executable = compiled.executable
    compiled.run({"x": x})  # the arena holds this input from here on

    def device():
        ctx = Encoder(executable.gpu)
        executable.encode(ctx)
        ctx.wait()
    return {"device": device}


DEVICE_ONLY = {"tpu": _tpu_contenders, "wgpu": _wgpu_contenders}


def bench_device(device: str, args) -> dict:
    graph, params = transformer_block(batch=1, seq=args.seq, d_model=args.d_model)
    compiled = Session(device).compile(graph)
    compiled.set_params(params)
    backend = compiled.backend
    if backend not in DEVICE_ONLY:
        raise ValueError(f"no device-only measurement for backend '{backend}' (this script knows "
                         f"{', '.join(DEVICE_ONLY)}; rlx-cuda's split is in cuda_bench.py)")
    x = example_inputs(graph, seed=0)["x"]
    contenders = {"run": lambda: compiled.run({"x": x}), **DEVICE_ONLY[backend](graph, params, x, compiled)}
    times = interleaved_times(contenders, args.rounds, warmup=3)
    ms = {name: round(1e3 * statistics.median(ts), 4) for name, ts in times.items()}
    host_us = statistics.median(1e6 * (r - d) for r, d in zip(times["run"], times["device"]))
    return {"device": device, "backend": backend, "rounds": args.rounds, "median_ms": ms,
            "split": round(paired_ratio(times["run"], times["device"]), 3), "host_us": round(host_us, 1),
            "graph": graph.name}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_bench_args(p, DEVICES, rounds=200, results="run_split")
    args = p.parse_args(argv)
    rows, skipped = per_device(args.devices, lambda device: bench_device(device, args), "run_split")
    table = markdown_table(
        ["device", "backend", "run ms (numpy in/out)", "device-only ms", "run / device", "host us per run",
         "run, device arrays ms"],
        [(r["device"], r["backend"], r["median_ms"]["run"], r["median_ms"]["device"], f"{r['split']:.2f}x",
          r["host_us"], r["median_ms"].get("run_device_arrays", "")) for r in rows])
    text = (f"Run-path split, b1 transformer block (seq {args.seq}, d_model {args.d_model}), median of "
            f"{args.rounds} interleaved rounds: full run() with numpy in/out vs the compiled work alone on "
            f"inputs already on the device.\n\n" + table)
    report_per_device("run_split", args.output, text, rows, skipped)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())

"""Where rlx-tpu's first compile of the transformer block spends its time, next to jax.jit's.

    python benchmarks/tpu_compile.py                                  # XLA:CPU, small block
    RLX_TPU_PLATFORM=gpu python benchmarks/tpu_compile.py --batch 8 --seq 512 --d-model 1024 --dtype bf16

Each compile is measured in a fresh process (XLA keeps autotuning results and compiled
kernels for the life of a process, so whichever of two compilers goes second in one
process finds the GEMM configurations already tuned -- ``benchmarks/tpu_block.py``
compiles RLX first and so under-reports jax.jit's first compile). A process first
warms XLA up with a trivial program (its one-time start-up belongs to neither), then
splits the compile into:

* ``trace``: tracing to a jaxpr; ``lower``: jaxpr to StableHLO; ``xla``: XLA's compile
  of that module, autotuning included -- each from JAX's own compile events;
* ``other``: the rest (for RLX: building and checking the graph, the core's passes,
  the plugin's set-up).

It also runs both compilers in one process in either order to show the cache effect. Results: ``benchmarks/results/tpu_compile_<platform>.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE))

import tpu_block  # noqa: E402  (the block, its weights and the direct-JAX version)
from common import write_results  # noqa: E402


def _warm_xla(platform: str) -> None:
    import jax
    import numpy as np
    x = jax.device_put(np.ones(4, np.float32), jax.devices(platform)[0])
    jax.jit(lambda t: t + 1).lower(x).compile()


def compile_split(which: str, cfg: dict) -> dict:
    """Seconds of each phase of ``which``'s first compile in this process ("rlx" | "jax"),
    from JAX's own compile events (the same probes for both)."""
    import jax
    from jax import monitoring
    from rlx_tpu.platform import requested_platform
    device = jax.devices(requested_platform())[0]
    weights = {k: jax.device_put(v, device) for k, v in tpu_block.block_weights(cfg).items()}
    x = jax.device_put(tpu_block.block_input(cfg), device)
    events: dict[str, float] = {}

    def listener(event, seconds, **_):
        events[event] = events.get(event, 0.0) + seconds
    monitoring.register_event_duration_secs_listener(listener)
    try:
        t0 = time.perf_counter()
        if which == "jax":
            jax.jit(tpu_block.jax_block(cfg)).lower(weights, x).compile()
        else:
            from rlx_core import Session
            Session("tpu").compile(tpu_block.rlx_block(cfg))
        total = time.perf_counter() - t0
    finally:
        monitoring.unregister_event_duration_listener(listener)
    trace = sum(v for k, v in events.items() if "jaxpr_trace" in k)
    lower = sum(v for k, v in events.items() if "to_mlir_module" in k)
    xla = sum(v for k, v in events.items() if "backend_compile" in k)
    return {"total_s": total, "trace_s": trace, "lower_s": lower, "xla_s": xla,
            "other_s": total - trace - lower - xla, "events": events}


def _child(args) -> int:
    from rlx_tpu.platform import requested_platform
    cfg = json.loads(args.child_cfg)
    _warm_xla(requested_platform())
    out = {}
    for which in args.child.split(","):
        out[which] = compile_split(which, cfg)
    print("RESULT " + json.dumps(out))
    return 0


def _in_fresh_process(order: str, cfg: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", order, "--child-cfg", json.dumps(cfg)],
                          capture_output=True, text=True, timeout=900, env=os.environ.copy())
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"compile child ({order}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-cfg", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    from rlx_tpu.platform import requested_platform
    cfg = tpu_block.block_config(args.batch, args.seq, args.d_model, dtype=args.dtype)
    fresh_rlx = _in_fresh_process("rlx", cfg)["rlx"]
    fresh_jax = _in_fresh_process("jax", cfg)["jax"]
    rlx_then_jax = _in_fresh_process("rlx,jax", cfg)
    jax_then_rlx = _in_fresh_process("jax,rlx", cfg)
    result = {"platform": requested_platform(), "config": cfg,
              "fresh_process": {"rlx": fresh_rlx, "jax": fresh_jax},
              "rlx_over_jax_fresh": fresh_rlx["total_s"] / fresh_jax["total_s"],
              "one_process_rlx_then_jax": rlx_then_jax, "one_process_jax_then_rlx": jax_then_rlx}
    print(json.dumps(result, indent=2))
    out = HERE / "results" / f"tpu_compile_{result['platform']}.json"
    write_results(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""rlx-tpu's host time per call against ``jax.jit``'s, on the same XLA platform.

    python benchmarks/tpu_dispatch.py                    # XLA:CPU
    RLX_TPU_PLATFORM=gpu python benchmarks/tpu_dispatch.py   # XLA:GPU (the H200)

Two workloads: ``add`` (one add of two [8] f32 inputs: the device's work is nothing, a
call's time is its host path) and ``block`` (the b1 transformer block of
``tpu_block.py``, RLX's graph and the hand-written JAX block with the same numerics).
Each round calls every contender ``--calls`` times back to back, in a shuffled order
(``common.interleaved_times``), each call waited for:

* ``rlx_numpy`` / ``xla_numpy`` / ``jit_numpy``: numpy in, numpy out -- ``run``; RLX's
  XLA program called directly (``TpuExecutable.launch``: the ``jax.stages.Compiled``
  object, no RLX checks); the ``jax.jit`` function;
* ``rlx_jax`` / ``xla_jax`` / ``jit_jax``: the same with JAX arrays in and out
  (``outputs="jax"``), waited for;
* ``rlx_submit``: ``submit(numpy).wait()`` (a handle per call).

``xla_*`` runs the very program ``run`` runs, so ``rlx - xla`` is RLX's own host path;
``xla - jit`` is what calling a ``Compiled`` object costs against jax.jit's dispatch
(plus, for the block, the two programs' difference). The report gives microseconds
per call and these differences (median over rounds of the paired difference); the
goal for ``rlx - jit`` is at most ~20 us. Results:
``benchmarks/results/tpu_dispatch_<platform>.json`` / ``.md`` (``--output`` to change).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_times, machine, markdown_table, progress, use_checkout, write_results  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

GOAL_US = 20.0
CONTENDERS = ("rlx_numpy", "xla_numpy", "jit_numpy", "rlx_jax", "xla_jax", "jit_jax", "rlx_submit")
PAIRS = (("rlx_numpy", "xla_numpy"), ("rlx_jax", "xla_jax"), ("xla_jax", "jit_jax"), ("rlx_numpy", "jit_numpy"),
         ("rlx_jax", "jit_jax"), ("rlx_submit", "rlx_numpy"))


def _add_workload():
    """(graph, params, inputs, jax function of (params, inputs)) for one add on [8] f32."""
    from rlx_core import Graph
    g = Graph("add8")
    g.set_outputs([g.add(g.input("a", (8,), "f32"), g.input("b", (8,), "f32"))], names=["y"])
    inputs = {"a": np.arange(8, dtype=np.float32), "b": np.ones(8, np.float32)}
    return g, {}, inputs, lambda params, xs: xs["a"] + xs["b"]


def _block_workload():
    from rlx_core.testing.scripts import load_script
    block = load_script(Path(__file__).resolve().parent / "tpu_block.py")
    cfg = block.block_config()
    fn = block.jax_block(cfg)
    return block.rlx_block(cfg), block.block_weights(cfg), {"x": block.block_input(cfg)}, \
        lambda params, xs: fn(params, xs["x"])


WORKLOADS = {"add": _add_workload, "block": _block_workload}


def bench_workload(name: str, args) -> dict:
    import jax
    from rlx_core import CompileOptions, Session
    graph, params, inputs, fn = WORKLOADS[name]()
    host = Session("tpu").compile(graph)
    on_device = Session("tpu").compile(graph, CompileOptions(backend={"outputs": "jax"}))
    device = jax.devices(on_device.executable.program.placement.platform)[0]
    dev_params = {k: jax.device_put(v, device) for k, v in params.items()}
    for compiled in (host, on_device):
        compiled.set_params(dev_params)
    dev_inputs = {k: jax.device_put(v, device) for k, v in inputs.items()}
    jitted = jax.jit(fn)
    launch = host.executable.launch
    host_feeds = tuple(inputs[n] for n in graph.input_names)
    dev_feeds = tuple(dev_inputs[n] for n in graph.input_names)
    np.testing.assert_allclose(np.asarray(jitted(dev_params, inputs)), host.run(inputs)[0], rtol=1e-4, atol=1e-4)

    def repeat(call):
        def calls():
            for _ in range(args.calls):
                call()
        return calls
    contenders = {
        "rlx_numpy": repeat(lambda: host.run(inputs)),
        "xla_numpy": repeat(lambda: [np.asarray(y) for y in launch(host_feeds)]),
        "jit_numpy": repeat(lambda: np.asarray(jitted(dev_params, inputs))),
        "rlx_jax": repeat(lambda: jax.block_until_ready(list(on_device.run(dev_inputs)))),
        "xla_jax": repeat(lambda: jax.block_until_ready(launch(dev_feeds))),
        "jit_jax": repeat(lambda: jitted(dev_params, dev_inputs).block_until_ready()),
        "rlx_submit": repeat(lambda: host.submit(inputs).wait()),
    }
    times = interleaved_times(contenders, args.rounds, warmup=2)
    us = {k: 1e6 * statistics.median(v) / args.calls for k, v in times.items()}
    differences = {f"{a} - {b}": statistics.median(1e6 * (x - y) / args.calls for x, y in zip(times[a], times[b]))
             for a, b in PAIRS}
    return {"workload": name, "graph": graph.name, "us_per_call": {k: round(v, 2) for k, v in us.items()},
            "differences_us": {k: round(v, 2) for k, v in differences.items()}, "calls": args.calls, "rounds": args.rounds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="add,block")
    p.add_argument("--calls", type=int, default=50, help="calls per contender per round")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--output", help="results .json path (default benchmarks/results/tpu_dispatch_<platform>.json)")
    args = p.parse_args(argv)
    import jax
    from rlx_tpu.platform import requested_platform
    platform = requested_platform()
    rows = []
    for name in [w.strip() for w in args.workloads.split(",") if w.strip()]:
        progress(f"tpu_dispatch: {name} ...")
        rows.append(bench_workload(name, args))
    table = markdown_table(["workload", *CONTENDERS],
                           [(r["workload"], *(f"{r['us_per_call'][k]:.1f}" for k in CONTENDERS)) for r in rows])
    table += "\n" + markdown_table(
        ["workload", *(f"{a} - {b}" for a, b in PAIRS)],
        [(r["workload"], *(f"{v:+.1f}" for v in r["differences_us"].values())) for r in rows])
    device = jax.devices(platform)[0].device_kind
    text = (f"rlx-tpu vs jax.jit per call on {platform} ({device}, jax {jax.__version__}): microseconds per "
            f"call, each waited, median of {args.rounds} interleaved rounds of {args.calls} calls; below, the "
            f"median paired differences (goal: rlx - jit <= {GOAL_US:.0f} us).\n\n" + table)
    print(text)
    name = "h200" if "H200" in device.upper() else platform
    write_results(Path(args.output) if args.output else f"tpu_dispatch_{name}",
                  {"machine": machine(), "platform": platform, "device_kind": device, "jax": jax.__version__,
                   "results": rows, "goal_us": GOAL_US}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""rlx-cpu against onnxruntime, jax.jit and numpy eager on the standard models.

    python benchmarks/cpu_bench.py            # ~2-3 minutes; writes results/cpu.{json,md}, updates README
    python benchmarks/cpu_bench.py --rounds 2 --models elementwise_chain   # a quick look
    python benchmarks/cpu_bench.py --busy-cores 1   # another process holds a core: results/cpu_loaded.*

Models (``rlx_core.models``): (a) MLP 784-512-512-10, batch 64; (b) transformer encoder
block, d_model 256, 4 heads, seq 128, ffn 1024, batch 1; (c) small CNN on 1x3x64x64;
(d) 16 elementwise ops on 256 floats (per-op dispatch cost); (e) compile time of (b):
cold (empty kernel cache), warm (a second process, disk cache) and a CompileCache hit.

Every runtime computes the same graph with the same weights (``cpu_peers`` translates
it) and its outputs are checked against the reference interpreter before timing. Each
runtime lives in its own worker process; the driver asks them in turn (the order
rotating every round) for a short burst of timed runs of one model, for many rounds,
so that load from other processes falls on every runtime alike; each burst starts after
a short pause (``SETTLE_S``). The reported latency
is the median over rounds of each burst's median. Threads: 2 everywhere (onnxruntime
intra-op threads, numpy's OpenBLAS; XLA's CPU client uses all cores of this 2-core
machine; rlx-cpu picks 1 or 2 BLAS threads per matmul by measurement). The run also
measures the CompiledGraph.run wrapper's share of (d) and tracemalloc's count of
bytes allocated by a steady-state run of (b). With ``--busy-cores N``, N other processes
spin in a busy loop while the bursts run (the loaded machine; results go to
``results/cpu_loaded.*``, the README is left alone, no compile times are taken).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from common import (ROOT, Worker, in_subprocess, machine, markdown_table, median_of, progress, sample, summary,
                    use_checkout, worker_main, write_results)

SCRIPT = Path(__file__).resolve()
MODELS = ("mlp", "transformer_block", "small_cnn", "elementwise_chain")
LABELS = {"mlp": "(a) MLP 784-512-512-10, batch 64", "transformer_block": "(b) encoder block d256 h4 s128 f1024",
          "small_cnn": "(c) CNN 1x3x64x64", "elementwise_chain": "(d) 16 elementwise ops, 256 floats"}
RUNTIMES = ("rlx-cpu", "onnxruntime", "jax.jit", "numpy")
THREADS = 2
TARGETS = {"mlp": 1.0, "transformer_block": 1.0, "small_cnn": 1.0, "elementwise_chain": 1.5}  # x onnxruntime
COMPILE_TARGETS_MS = {"cold": 2000.0, "warm": 100.0, "cache_hit": 1.0}
ALLOC_TARGET_BYTES = 4096
# Pause before each burst: the previous runtime's idle threads spin on (onnxruntime's about
# 40 ms, OpenBLAS's about 100 ms after their last call) and would load the next one's burst.
SETTLE_S = 0.2


# --- workers (each in its own process) ---------------------------------------------------------
def _runner(runtime: str, graph, params):
    if runtime == "rlx-cpu":
        from rlx_core import Session
        compiled = Session("cpu").compile(graph)
        compiled.set_params(params)
        return compiled.run
    from cpu_peers import PEERS
    return PEERS[runtime](graph, params, THREADS)


class _Runtime:
    """A worker's state: one runtime's runner and inputs for every model."""

    runs: dict = {}


def setup_worker(runtime: str, names: list[str]) -> str:
    """Build ``runtime``'s runner for each model and check it against the reference."""
    use_checkout()
    from rlx_core import evaluate, models
    for name in names:
        graph, params = models.MODELS[name]()
        inputs = models.example_inputs(graph)
        run = _runner(runtime, graph, params)
        got, want = np.asarray(run(inputs)[0]), evaluate(graph, inputs, params)[0]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=f"{runtime} on {name}")
        _Runtime.runs[name] = (run, inputs)
    return runtime


def burst_worker(name: str, budget_s: float) -> dict:
    """One burst of timed runs of model ``name``."""
    run, inputs = _Runtime.runs[name]
    return summary(sample(lambda: run(inputs), warmup=3, min_runs=5, budget_s=budget_s))


def diagnostics_worker(names: list[str], budget_s: float) -> dict:
    return _rlx_diagnostics(names, budget_s)


def _rlx_diagnostics(names: list[str], budget_s: float) -> dict:
    from rlx_core import Session, models
    result = {}
    if "elementwise_chain" in names:  # what CompiledGraph.run's checks add to the executable's run
        graph, _ = models.elementwise_chain()
        compiled = Session("cpu").compile(graph)
        inputs = models.example_inputs(graph)
        out = [np.empty(256, np.float32)]
        result["chain_compiled_run_us"] = summary(sample(lambda: compiled.run(inputs), budget_s=budget_s))["median_us"]
        result["chain_executable_run_us"] = summary(
            sample(lambda: compiled.executable.run(inputs), budget_s=budget_s))["median_us"]
        result["chain_compiled_run_out_us"] = summary(
            sample(lambda: compiled.run(inputs, out=out), budget_s=budget_s))["median_us"]
        result["chain_steps"] = len(compiled.executable.steps)
    if "transformer_block" in names:
        result["alloc_bytes_per_run"] = {str(seq): _allocated_per_run(seq) for seq in (128, 512)}
        graph, _ = models.transformer_block()
        result["block_steps"] = [s.label for s in Session("cpu").compile(graph).executable.steps]
    return result


def _allocated_per_run(seq: int) -> dict:
    """Peak bytes tracemalloc sees during one steady-state run of the block (``out=``)."""
    from rlx_core import Session, models
    graph, params = models.transformer_block(seq=seq)
    compiled = Session("cpu").compile(graph)
    compiled.set_params(params)
    inputs = models.example_inputs(graph)
    out = [np.empty(s.dims, s.dtype.np) for s in compiled.output_shapes]
    feeds = dict(inputs)
    result = {}
    for label, call in (("compiled_run", lambda: compiled.run(inputs, out=out)),
                        ("executable_run", lambda: compiled.executable.run(feeds, out))):
        for _ in range(3):
            call()
        tracemalloc.start()
        peaks = []
        for _ in range(5):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            call()
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        tracemalloc.stop()
        result[label] = max(peaks)
    return result


def compile_worker(phase: str) -> dict:
    """Times of one process compiling the block (b) against the cache in XDG_CACHE_HOME."""
    t0 = time.perf_counter()
    use_checkout()
    from rlx_core import CompileCache, Session, models
    import rlx_cpu.jit
    t_import = time.perf_counter() - t0
    graph, _ = models.transformer_block()
    session = Session("cpu")
    t0 = time.perf_counter()
    rlx_cpu.jit.warm_up()  # numba's one-time start-up, kept out of the compile time
    t_numba = time.perf_counter() - t0
    t0 = time.perf_counter()
    cache = CompileCache()
    cache.get_or_compile(session, graph)
    t_compile = time.perf_counter() - t0
    hit = summary(sample(lambda: cache.get_or_compile(session, graph), warmup=3, min_runs=200, budget_s=0.2))
    return {"phase": phase, "import_ms": t_import * 1e3, "numba_start_ms": t_numba * 1e3,
            "compile_ms": t_compile * 1e3, "cache_hit_ms": hit["median_us"] / 1e3}


# --- driver -----------------------------------------------------------------------------------
@contextlib.contextmanager
def busy_cores(count: int):
    """``count`` other processes spinning in a busy loop while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def measure(names: list[str], rounds: int, budget_s: float, busy: int = 0) -> dict:
    workers = {}
    cache = tempfile.TemporaryDirectory(prefix="rlx-bench-cache-")  # rlx-cpu measures its choices afresh
    try:
        for runtime in RUNTIMES:
            progress(f"starting {runtime}: building and checking {len(names)} models ...")
            workers[runtime] = Worker(SCRIPT, env={"XDG_CACHE_HOME": cache.name})
            workers[runtime].call("setup", runtime, names)
        bursts: dict[str, dict[str, list[dict]]] = {n: {r: [] for r in RUNTIMES} for n in names}
        with busy_cores(busy):
            for k in range(rounds):
                progress(f"round {k + 1}/{rounds}")
                order = RUNTIMES[k % len(RUNTIMES):] + RUNTIMES[:k % len(RUNTIMES)]
                for name in names:
                    for runtime in order:
                        time.sleep(SETTLE_S)
                        bursts[name][runtime].append(workers[runtime].call("burst", name, budget_s))
        diagnostics = workers["rlx-cpu"].call("diagnostics", names, budget_s) if not busy else {}
    finally:
        for w in workers.values():
            w.close()
        cache.cleanup()
    compile_rounds = []
    for k in range(0 if busy else 3):
        with tempfile.TemporaryDirectory(prefix="rlx-bench-cache-") as cache:
            env = {"XDG_CACHE_HOME": cache}
            progress(f"compile time {k + 1}/3: cold and warm ...")
            compile_rounds.append({phase: in_subprocess(SCRIPT, "compile", phase, env=env)
                                   for phase in ("cold", "warm")})
    return {"bursts": bursts, "compile_rounds": compile_rounds, "diagnostics": diagnostics}


def aggregate(raw: dict, names: list[str]) -> dict:
    latency = {name: {rt: median_of(b["median_us"] for b in raw["bursts"][name][rt]) for rt in RUNTIMES}
               for name in names}
    ratios = {name: {rt: latency[name]["rlx-cpu"] / latency[name][rt] for rt in RUNTIMES if rt != "rlx-cpu"}
              for name in names}
    p90 = {name: {rt: median_of(b["p90_us"] for b in raw["bursts"][name][rt]) for rt in RUNTIMES} for name in names}
    if not raw["compile_rounds"]:
        return {"latency_us": latency, "ratio_vs": ratios, "p90_us": p90, "diagnostics": raw["diagnostics"]}
    compile_ms = {
        "cold": median_of(r["cold"]["compile_ms"] for r in raw["compile_rounds"]),
        "warm": median_of(r["warm"]["compile_ms"] for r in raw["compile_rounds"]),
        "cache_hit": median_of(r["warm"]["cache_hit_ms"] for r in raw["compile_rounds"]),
        "numba_start_cold": median_of(r["cold"]["numba_start_ms"] for r in raw["compile_rounds"]),
        "numba_start_warm": median_of(r["warm"]["numba_start_ms"] for r in raw["compile_rounds"]),
        "import": median_of(r["warm"]["import_ms"] for r in raw["compile_rounds"]),
    }
    return {"latency_us": latency, "ratio_vs": ratios, "p90_us": p90, "compile_ms": compile_ms,
            "diagnostics": raw["diagnostics"]}


def render(results: dict, names: list[str]) -> str:
    lat, ratio = results["latency_us"], results["ratio_vs"]
    quiet = "compile_ms" in results  # the targets are for a quiet machine
    rows = []
    for name in names:
        target = TARGETS[name]
        verdict = "met" if ratio[name]["onnxruntime"] <= target else f"missed ({ratio[name]['onnxruntime']:.2f}x)"
        rows.append([LABELS[name]] + [f"{lat[name][rt]:,.1f}" for rt in RUNTIMES]
                    + [f"{ratio[name][rt]:.2f}x" for rt in RUNTIMES[1:]] + [f"<= {target}x ort: {verdict}"][:quiet])
    text = markdown_table(["model", "rlx-cpu us", "onnxruntime us", "jax.jit us", "numpy us",
                           "vs ort", "vs jax", "vs numpy", "target"][:9 if quiet else 8], rows)
    if not quiet:  # a loaded run: the tails matter too
        p90 = results["p90_us"]
        rows = [[LABELS[name]] + [f"{p90[name][rt]:,.1f}" for rt in RUNTIMES] for name in names]
        return text + "\n90th percentile of each burst (median over bursts):\n\n" + \
            markdown_table(["model"] + [f"{rt} p90 us" for rt in RUNTIMES], rows)
    c = results["compile_ms"]
    rows = [["cold (empty cache)", f"{c['cold']:,.0f}", f"<= {COMPILE_TARGETS_MS['cold']:,.0f}"],
            ["warm (2nd process, disk cache)", f"{c['warm']:,.1f}", f"<= {COMPILE_TARGETS_MS['warm']:,.0f}"],
            ["CompileCache hit", f"{c['cache_hit']:.3f}", f"<= {COMPILE_TARGETS_MS['cache_hit']:.0f}"],
            ["numba start-up, once per process (cold / warm cache)",
             f"{c['numba_start_cold']:,.0f} / {c['numba_start_warm']:,.0f}", "not included above"]]
    text += "\n" + markdown_table(["(e) compile of (b)", "ms", "target ms"], rows)
    d = results["diagnostics"]
    if "alloc_bytes_per_run" in d:
        alloc = d["alloc_bytes_per_run"]
        text += ("\nSteady-state `run(x, out=...)` of (b), tracemalloc peak per call: "
                 + ", ".join(f"seq {seq}: {v['compiled_run']} B (executable alone {v['executable_run']} B)"
                             for seq, v in alloc.items())
                 + f" (target < {ALLOC_TARGET_BYTES} B).\n")
    if "chain_compiled_run_us" in d:
        share = 1 - d["chain_executable_run_us"] / d["chain_compiled_run_us"]
        text += (f"(d) runs as {d['chain_steps']} step(s): `CompiledGraph.run` {d['chain_compiled_run_us']:.1f} us, "
                 f"of which the wrapper's input checks are {share:.0%} (`executable.run` "
                 f"{d['chain_executable_run_us']:.1f} us); with `out=` {d['chain_compiled_run_out_us']:.1f} us.\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timed runs per burst")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-readme", action="store_true", help="do not update the README table")
    parser.add_argument("--busy-cores", type=int, default=0,
                        help="other processes spinning during the bursts (writes results/cpu_loaded.*)")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n]
    load_before = machine().get("load_average_1_5_15min")
    raw = measure(names, args.rounds, args.budget, args.busy_cores)
    results = aggregate(raw, names)
    results.update(machine=machine(), load_average_before=load_before, rounds=args.rounds, threads=THREADS,
                   busy_cores=args.busy_cores, raw=raw)
    markdown = render(results, names)
    json_path, md_path = write_results("cpu_loaded" if args.busy_cores else "cpu", results, markdown)
    print(markdown)
    progress(f"wrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}")
    if not args.no_readme and not args.busy_cores:
        import update_readme
        update_readme.main()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning")
    if not worker_main({"setup": setup_worker, "burst": burst_worker, "diagnostics": diagnostics_worker,
                        "compile": compile_worker}):
        main()

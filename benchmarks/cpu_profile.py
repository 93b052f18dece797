"""Where an rlx-cpu run spends its time: every call of the generated run, timed in place.

    python benchmarks/cpu_profile.py mlp                  # the quiet-machine plan
    python benchmarks/cpu_profile.py small_cnn --plan single
    python benchmarks/cpu_profile.py onnx:gru              # a model of onnx_cpu_bench.py, exported from torch

The model (``rlx_core.models``, or ``onnx:<name>`` for one of ``onnx_cpu_bench.py``'s, exported
and imported as that benchmark does) is compiled as the benchmark compiles it; the calls of
its run (input copies, kernels, BLAS calls with the thread count of the chosen plan) are
then made in order, one after another as the run makes them, ``--runs`` times, each
call timed on its own. A call is reported with the median of its times, so that caches
and the other core's state are those the real run sees (a call timed alone in a loop
can be several times faster: see the README). The sum is compared with the median of
whole runs of the same plan.
"""
from __future__ import annotations

import argparse
import statistics
import time

from common import use_checkout


def profile(name: str, plan: str, runs: int) -> list[tuple[str, str, float]]:
    """``(label, call, median seconds)`` for every call of the run, in order."""
    import numpy as np
    from rlx_core import Session, models
    from rlx_cpu.executable import _Feed
    from rlx_cpu.load import LOADED, QUIET
    from rlx_cpu.threads import blas_threads, plan_blas_call, single_threaded

    if name.startswith("onnx:"):
        import tempfile
        from pathlib import Path
        import onnx_cpu_bench
        path, inputs = onnx_cpu_bench.export_models([name[5:]], Path(tempfile.mkdtemp()))[name[5:]]
        _, compiled = onnx_cpu_bench.rlx_runner(path)
    else:
        graph, params = models.MODELS[name]()
        compiled = Session("cpu").compile(graph)
        compiled.set_params(params)
        inputs = models.example_inputs(graph)
    state = {"quiet": QUIET, "loaded": LOADED}.get(plan, QUIET)
    choose = single_threaded if plan == "single" else (lambda c: plan_blas_call(c, state))
    calls = []
    for label, step_calls in compiled.executable._runs._planned(choose):
        for c in step_calls:
            args = tuple(inputs[a.name] if isinstance(a, _Feed) else a for a in c.args)
            calls.append((label or "input copies", c._replace(args=args)))
    control = blas_threads()
    times = [[] for _ in calls]
    with np.errstate(all="ignore"):
        for _ in range(runs):
            for k, (_, c) in enumerate(calls):
                if control is not None and c.threads is not None:
                    control.apply(c.threads)
                t0 = time.perf_counter()
                c.fn(*c.args, **c.kwargs)
                times[k].append(time.perf_counter() - t0)
            if control is not None:
                control.restore()
    return [(label, _describe(c), statistics.median(t[runs // 10:])) for (label, c), t in zip(calls, times)]


def _describe(call) -> str:
    fn = getattr(call.fn, "__name__", None) or type(call.fn).__name__
    shapes = [a.shape for a in call.args if hasattr(a, "shape")][:2]
    threads = {None: "", 0: " [OpenBLAS threads]", 1: " [1 thread]"}.get(call.threads, "")
    return f"{fn}{threads} {' '.join(map(str, shapes))}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--plan", choices=["quiet", "single"], default="quiet",
                        help="the quiet machine's BLAS plan, or every BLAS call on one thread")
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    use_checkout()
    rows = profile(args.model, args.plan, args.runs)
    total = sum(t for _, _, t in rows)
    for label, call, t in rows:
        print(f"{t * 1e6:9.1f} us {t / total:6.1%}  {call:60.60s} {label[:60]}")
    print(f"{total * 1e6:9.1f} us  sum of the calls' medians ({args.plan} plan)")


if __name__ == "__main__":
    main()

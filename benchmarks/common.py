"""Shared helpers of the benchmarks: measuring, isolating, summarizing, recording.

* ``use_checkout()`` puts this checkout's ``rlx_core`` and plugins first on
  ``sys.path``, so a benchmark measures the code next to it, not an installed copy.
* ``sample(fn)`` times repeated calls after a warm-up; ``summary`` reduces the
  samples to median and spread; ``median_of`` combines the medians of several rounds.
* ``Worker(script)`` keeps ``script --serve`` running in its own interpreter and calls
  its handlers by name (JSON over stdin/stdout). A benchmark gives each runtime its
  own worker (no two thread pools in one process, no state left over from another
  library) and asks them in turn for short bursts of timed runs, many rounds: load
  that other processes put on the machine then falls on every runtime alike.
* ``in_subprocess(script, *args)`` runs ``script --worker <json args>`` once in a fresh
  interpreter (for what must start cold, such as compile times) and returns its JSON.
* ``write_results(name or path, data, markdown=None)`` writes ``results/<name>.json`` (or the
  given ``.json`` path) and the markdown beside it; ``update_readme.py`` copies the markdown
  into the README.
* ``interleaved_times(contenders, repeats)`` times contenders one call each per round, in
  a shuffled order; ``paired_ratio(a, b)`` is the median over rounds of a / b;
  ``allocated_per_call(fn)`` is tracemalloc's peak during a steady-state call.
* ``per_device(devices, bench, label)`` runs a per-device benchmark on each device of a
  comma-separated list that is available, keeping why the others have no row.
* ``machine()`` describes the host (CPU, cores, library versions, BLAS).
* ``cublas_sgemm(a, b)`` and ``numpy_matmul(a, b)`` time one f32 product as the peers of
  a backend's GEMM: cuBLAS through CuPy (TF32 off; None without a CUDA GPU), numpy's BLAS.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

__all__ = ["ROOT", "RESULTS", "use_checkout", "sample", "summary", "median_of", "Worker", "in_subprocess",
           "worker_main", "write_results", "markdown_table", "machine", "progress", "per_device", "cublas_sgemm",
           "numpy_matmul", "interleaved_times", "paired_ratio", "allocated_per_call"]


def use_checkout() -> None:
    """Import ``rlx_core`` and every ``plugins/*`` package from this checkout."""
    paths = [str(ROOT)] + [str(p) for p in sorted((ROOT / "plugins").glob("*")) if p.is_dir()]
    for p in reversed(paths):
        if p not in sys.path:
            sys.path.insert(0, p)


def sample(fn: Callable[[], Any], *, warmup: int = 10, min_runs: int = 30, budget_s: float = 1.0) -> list[float]:
    """Seconds per call of ``fn``: ``warmup`` untimed calls, then timed calls until both
    ``min_runs`` calls and ``budget_s`` seconds are done."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def summary(times: Sequence[float]) -> dict[str, float]:
    """Median, 10th and 90th percentile (microseconds) and the number of samples."""
    ordered = sorted(times)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6

    return {"median_us": statistics.median(ordered) * 1e6, "p10_us": pct(0.1), "p90_us": pct(0.9),
            "n": len(ordered)}


def median_of(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def interleaved_times(contenders: dict, repeats: int, warmup: int = 1, settle_s: float = 0.0,
                      prime: dict | None = None) -> dict[str, list[float]]:
    """Seconds per call of each contender: ``warmup`` untimed rounds, then ``repeats``
    rounds of one call of each, in a shuffled order (seeded), so that a slow spell of a
    shared machine hits them all alike. ``settle_s``: an untimed pause before each timed
    call (runtimes sharing a process: the one before's idle threads spin on a while).
    ``prime``: name -> an untimed call made after that pause, right before the contender's
    timed one (wakes its own thread pool, which went to sleep during the pause)."""
    import numpy as np
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    order = list(contenders)
    times = {name: [] for name in contenders}
    shuffle = np.random.default_rng(0).permutation
    for _ in range(repeats):
        for name in shuffle(order):
            if settle_s:
                time.sleep(settle_s)
            if prime and name in prime:
                prime[name]()
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def allocated_per_call(call: Callable[[], Any], warmup: int = 3, repeats: int = 5) -> int:
    """tracemalloc's peak bytes during one call of ``call`` (the max over ``repeats``
    calls, after ``warmup``): what a steady-state run allocates."""
    import tracemalloc
    for _ in range(warmup):
        call()
    tracemalloc.start()
    peaks = []
    for _ in range(repeats):
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        call()
        peaks.append(tracemalloc.get_traced_memory()[1] - base)
    tracemalloc.stop()
    return max(peaks)


def paired_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """The median over rounds of a / b (robust to drift between rounds)."""
    return statistics.median(x / y for x, y in zip(a, b))


def in_subprocess(script: Path, *args: Any, env: dict[str, str] | None = None, timeout: float = 600) -> Any:
    """Run ``python script --worker '<json args>'`` and return the JSON of its last stdout
    line (stderr passes through). Raises RuntimeError with the worker's output on failure."""
    proc = subprocess.run([sys.executable, str(script), "--worker", json.dumps(list(args))],
                          stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {script.name} {args} failed (exit {proc.returncode}):\n{proc.stdout}")
    return json.loads(lines[-1])


class Worker:
    """``script --serve`` in a child process; ``call(name, *args)`` runs its handler."""

    def __init__(self, script: Path, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, str(script), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})

    def call(self, name: str, *args: Any) -> Any:
        self.proc.stdin.write(json.dumps([name, *args]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker died during {name}{args} (exit {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"worker failed in {name}{args}:\n{reply['error']}")
        return reply["result"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def worker_main(handlers: dict[str, Callable[..., Any]]) -> bool:
    """Serve ``handlers`` if this process is a ``Worker`` (``--serve``) or an
    ``in_subprocess`` run (``--worker``); returns whether it was one."""
    if len(sys.argv) >= 3 and sys.argv[1] == "--worker":
        name, *args = json.loads(sys.argv[2])
        result = handlers[name](*args)
        sys.stdout.flush()
        print(json.dumps(result))
        return True
    if len(sys.argv) >= 2 and sys.argv[1] == "--serve":
        import traceback
        replies = sys.stdout
        sys.stdout = sys.stderr  # whatever handlers print must not garble the replies
        for line in sys.stdin:
            name, *args = json.loads(line)
            try:
                reply = {"result": handlers[name](*args)}
            except Exception:  # noqa: BLE001 -- reported to the driver, which raises
                reply = {"error": traceback.format_exc()}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()
        return True
    return False


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_device_bench_args(parser, devices, rounds: int, results: str) -> None:
    """The options the per-device block benchmarks share: ``--devices``, ``--rounds``,
    ``--seq``, ``--d-model`` and ``--output`` (default ``results/<results>_<host>.json``)."""
    parser.add_argument("--devices", default=",".join(devices), help="comma-separated (unavailable ones are skipped)")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--output", help=f"results .json path (default benchmarks/results/{results}_<host>.json)")


def per_device(devices: str, bench: Callable[[str], dict], label: str) -> tuple[list[dict], dict[str, str]]:
    """``bench(device)`` for each of the comma-separated ``devices``: the rows it returned,
    and by device why the others have none (not available here, or the error it raised:
    one device failing does not hide the others)."""
    from rlx_core.runtime import registry
    rows, skipped = [], {}
    for device in [d.strip() for d in devices.split(",") if d.strip()]:
        if not registry().is_available(device):
            skipped[device] = "not available here"
            continue
        progress(f"{label}: {device} ...")
        try:
            rows.append(bench(device))
        except Exception as e:
            skipped[device] = f"{type(e).__name__}: {e}"
        else:
            progress(f"  {rows[-1]}")
    return rows, skipped


def report_per_device(name: str, output: "str | None", text: str, rows: list[dict], skipped: dict[str, str],
                      **extra: Any) -> None:
    """Print a :func:`per_device` benchmark's table and what was skipped, then write its
    results to ``output`` (a .json path) or ``results/<name>_<host>.json`` (with ``extra``)."""
    print(text)
    for device, why in skipped.items():
        print(f"skipped {device}: {why}")
    host = platform.node().split(".")[0] or "host"
    write_results(Path(output) if output else f"{name}_{host}",
                  {"machine": machine(), "results": rows, "skipped": skipped, **extra}, text)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_results(target: "str | Path", data: dict, markdown: str | None = None) -> tuple[Path, Path | None]:
    """Write ``data`` as JSON and ``markdown`` (if given) beside it with a ``.md`` suffix.
    ``target`` is a results name (``results/<name>.json``) or a ``.json`` path."""
    json_path = Path(target) if isinstance(target, Path) else RESULTS / f"{target}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    md_path = None if markdown is None else json_path.with_suffix(".md")
    if md_path is not None:
        md_path.write_text(markdown)
    return json_path, md_path


def machine() -> dict[str, Any]:
    """The host and the versions that matter for CPU numbers (and the current load)."""
    import numpy as np
    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                            "cpus": os.cpu_count(), "numpy": np.__version__}
    if hasattr(os, "getloadavg"):
        info["load_average_1_5_15min"] = [round(v, 2) for v in os.getloadavg()]
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        info["cpu"] = platform.processor() or "unknown"
    try:
        from threadpoolctl import threadpool_info
        info["blas"] = [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                        for p in threadpool_info()]
    except ImportError:
        pass
    # Set by some hosts to keep old OpenBLAS builds off kernels they get wrong; it also holds
    # a current numpy's OpenBLAS on slower ones (its AVX2 kernels on an AVX-512 CPU).
    info["openblas_env"] = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    for module in ("numba", "onnxruntime", "jax", "torch"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            pass
    return info


def cublas_sgemm(a, b, iters: int = 20):
    """(GFLOP/s, product) of cuBLAS SGEMM through CuPy, or None without a CUDA GPU. TF32 is
    off (``CUPY_TF32=0``): plain f32 FMA, as the backends' kernels do. Timed with CUDA
    events around ``iters`` products, after warm-up."""
    os.environ["CUPY_TF32"] = "0"
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # no CuPy, no driver
        return None
    da, db = cp.asarray(a), cp.asarray(b)
    out = cp.matmul(da, db)
    for _ in range(3):
        cp.matmul(da, db, out=out)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        cp.matmul(da, db, out=out)
    stop.record()
    stop.synchronize()
    seconds = cp.cuda.get_elapsed_time(start, stop) / 1e3 / iters
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / seconds / 1e9, cp.asnumpy(out)


def numpy_matmul(a, b, repeats: int = 5):
    """(GFLOP/s of the fastest of ``repeats`` products, product) of numpy's host BLAS."""
    import numpy as np
    out, best = a @ b, float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / best / 1e9, out

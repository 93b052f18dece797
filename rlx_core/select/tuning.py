"""Helpers for a plugin's own calibration: the device-specific tuning a GPU plugin measures
once (GEMM tile, bandwidth, roundtrip, transfer) and keeps in its own JSON file.

rlx-wgpu, rlx-metal and rlx-rocm measure their devices through these, so that the cache
handling and the timing scaffolding are one piece of code:

* :func:`tuning_path` -- ``$XDG_CACHE_HOME/rlx/<prefix>-<slug>.json`` (``~/.cache/rlx``
  when unset), the slug made of the parts that identify the device;
* :func:`read_tuning` -- the cached figures, or None when the file is missing, does not
  parse, is not a trusted file (``rlx_core.runtime.safefs``: a link, another user's,
  writable by others) or fails the plugin's check (corrupt or stale: measured again);
* :func:`cached_tuning` -- read the cache unless ``refresh``, else measure and write it
  atomically (a cache that cannot be written only costs the cache, never the result);
* :func:`positive_figures` -- the usual check: each named figure a finite number in the
  plausible range of its unit (``calibration.PLAUSIBLE``; a warning names one that is not);
* :func:`batch_seconds` -- seconds per run of device work issued back to back;
* :func:`roundtrip_ns`, :func:`transfer_gbps` -- the fixed cost of one complete run and the
  host <-> device copy rate of complete runs;
* :func:`median_seconds` -- median seconds of a call after one warm-up call;
* :func:`tiny_graph`, :func:`random_feeds` -- the graphs timed and their inputs;
* :func:`matmul_graph`, :func:`stream_graph`, :func:`fma_chain_graph` -- the one-input
  (``x``) GEMM, bandwidth and vector-throughput graphs that rlx-mlx and rlx-tpu time;
* :func:`calibration_main` -- the ``python -m <plugin>.calibrate`` command.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..ir.graph import Graph
from ..runtime.safefs import UntrustedPathError, read_trusted
from .calibration import _write_atomic, cache_dir, figure_problem, note_cache_read

__all__ = ["tuning_path", "read_tuning", "write_tuning", "cached_tuning", "positive_figures", "batch_seconds",
           "roundtrip_ns", "transfer_gbps", "median_seconds", "tiny_graph", "random_feeds", "matmul_graph",
           "stream_graph", "fma_chain_graph", "calibration_main"]

log = logging.getLogger("rlx.select.tuning")


def tuning_path(prefix: str, *parts, limit: int = 80) -> Path:
    """``cache_dir() / "<prefix>-<slug>.json"``: ``parts`` joined by ``-``, every run of other
    characters than ASCII letters and digits made one ``-``, cut to ``limit`` characters."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", "-".join(str(p) for p in parts)).strip("-")
    return cache_dir() / f"{prefix}-{slug[:limit]}.json"


def positive_figures(data, keys) -> bool:
    """Whether ``data`` is a dict whose ``keys`` all hold a finite number in the plausible
    range of their unit (the last ``_`` part of the key; see ``calibration.PLAUSIBLE``).
    A figure outside it is named in a warning (the file is measured again)."""
    if not isinstance(data, dict):
        return False
    for k in keys:
        problem = figure_problem(k, data.get(k))
        if problem:
            if k in data:
                log.warning("calibration figures rejected: %s; measuring again", problem)
            return False
    return True


def read_tuning(path: Path, valid: Callable[[dict], bool]) -> dict | None:
    """The JSON object in ``path`` if ``valid(data)`` says so; None when the file is missing,
    unreadable, untrusted (with a warning), not an object, or ``valid`` rejects it (or raises)."""
    try:
        data = json.loads(read_trusted(path))
        return data if isinstance(data, dict) and valid(data) else None
    except UntrustedPathError as e:
        log.warning("calibration cache not used: %s; measuring again", e)
        return None
    except Exception:  # missing, unreadable, corrupt, stale: measured again
        return None


def write_tuning(path: Path, data: dict) -> bool:
    """Write ``data`` as JSON to ``path`` atomically; False (and a warning) when it cannot."""
    return _write_atomic(Path(path), json.dumps(data, indent=2))


def cached_tuning(path: Path, valid: Callable[[dict], bool], measure: Callable[[], dict],
                  refresh: bool = False) -> dict:
    """The figures cached in ``path`` (see :func:`read_tuning`), unless ``refresh`` or there
    are none: then ``measure()``, written to ``path`` (:func:`write_tuning`)."""
    cached = None if refresh else read_tuning(path, valid)
    if cached is not None:
        note_cache_read(path)
        return cached
    result = measure()
    write_tuning(path, result)
    return result


def batch_seconds(run: Callable[[int], float | None], min_seconds: float = 0.2, max_repeats: int = 200) -> float:
    """Seconds per run of device work: ``run(repeats)`` issues ``repeats`` runs back to back
    and waits for them. One run first (warms caches and clocks, and sizes the batch), then
    batches long enough to take ``min_seconds`` (2 to ``max_repeats`` runs); best of two.
    A batch's time is the wall time around ``run``, or what ``run`` returns: the device's
    own measure of the batch (GPU timestamps), taken when it is positive and within the
    wall time."""
    def timed(repeats: int) -> float:
        start = time.perf_counter()
        device = run(repeats)
        wall = time.perf_counter() - start
        return (device if device is not None and 0 < device <= wall else wall) / repeats
    once = timed(1)
    repeats = max(2, min(max_repeats, int(min_seconds / max(once, 1e-6))))
    return min(timed(repeats) for _ in range(2))


def _wall_ns(compiled, feeds: dict) -> float:
    start = time.perf_counter_ns()
    compiled.run(feeds)
    return float(time.perf_counter_ns() - start)


def roundtrip_ns(compiled, feeds: dict, runs: int = 30) -> float:
    """Median wall time (ns) of ``runs`` complete ``compiled.run(feeds)``: the fixed cost of
    a run when ``compiled`` is a one-element graph."""
    return float(np.median([_wall_ns(compiled, feeds) for _ in range(runs)]))


def transfer_gbps(compiled, feeds: dict, nbytes: float, device_s: float, roundtrip: float, runs: int = 3) -> float:
    """Host <-> device copy rate (GB/s) of complete runs of ``compiled`` moving ``nbytes`` in
    and out: best of ``runs``, less its device time ``device_s`` and the fixed ``roundtrip``
    (ns); the copies count for at least 5% of the run. At least 0.01 GB/s."""
    best = min(_wall_ns(compiled, feeds) for _ in range(runs))
    copy_ns = max(best - device_s * 1e9 - roundtrip, best * 0.05, 1.0)
    return max(nbytes / copy_ns, 0.01)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` timed calls of ``run()``, after one untimed warm-up call
    (which compiles and warms caches)."""
    run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_graph(n: int) -> Graph:
    """``calibrate_sgemm``: ``x @ x`` for an [n, n] f32 input ``x`` (2 n**3 flops)."""
    g = Graph("calibrate_sgemm")
    x = g.input("x", (n, n))
    g.set_outputs([g.matmul(x, x)])
    return g


def stream_graph(m: int) -> Graph:
    """``calibrate_stream``: ``x + 1`` over an [m] f32 input ``x`` (8 m bytes moved)."""
    g = Graph("calibrate_stream")
    x = g.input("x", (m,))
    g.set_outputs([x + 1.0])
    return g


def fma_chain_graph(m: int, steps: int = 8) -> Graph:
    """``calibrate_vector``: ``steps`` multiply-adds ``y * 0.999 + 0.001`` over an [m] f32
    input ``x`` (2 * steps flops per element)."""
    g = Graph("calibrate_vector")
    y = g.input("x", (m,))
    for _ in range(steps):
        y = y * 0.999 + 0.001
    g.set_outputs([y])
    return g


def tiny_graph(name: str, build: Callable, *shapes) -> Graph:
    """A graph named ``name`` of f32 inputs ``x0``, ``x1``... of ``shapes`` and the one
    output ``build(g, x0, x1, ...)``."""
    g = Graph(name)
    g.set_outputs([build(g, *(g.input(f"x{i}", s) for i, s in enumerate(shapes)))])
    return g


def random_feeds(graph: Graph, seed: int = 0) -> dict:
    """Standard-normal f32 inputs for every input of ``graph``."""
    rng = np.random.default_rng(seed)
    return {n.attrs["name"]: rng.standard_normal(n.attrs["dims"]).astype(np.float32) for n in graph.input_nodes}


def calibration_main(argv, *, prog: str, description: str, calibrate: Callable[..., dict],
                     size_help: str | None = None, device: tuple[str, str] | None = None) -> int:
    """The ``python -m <plugin>.calibrate`` command: ``--refresh`` (measure again even if
    cached), ``--size N`` when ``size_help`` is given (passed as ``matmul_size``), and
    ``--device`` when ``device`` = (default, help) is given (passed first). Prints progress
    and then the figures as JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if device is not None:
        parser.add_argument("--device", default=device[0], help=device[1])
    parser.add_argument("--refresh", action="store_true", help="measure again even if a cached result exists")
    if size_help is not None:
        parser.add_argument("--size", type=int, default=None, help=size_help)
    args = parser.parse_args(argv)
    lead = (args.device,) if device is not None else ()
    extra = {"matmul_size": args.size} if size_help is not None else {}
    result = calibrate(*lead, args.refresh, progress=lambda m: print(m, flush=True), **extra)
    print(json.dumps(result, indent=2))
    return 0

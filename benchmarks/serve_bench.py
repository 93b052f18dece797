"""Serving throughput and latency on Ray Serve (rlx-serve) against one process calling ``run``.

    python benchmarks/serve_bench.py                                  # here: cpu, 1 vs 2 replicas
    python benchmarks/serve_bench.py --device cuda --replicas 1,2,4 --features 1024 --hidden 4096 --rows 8
                                                                      # H200: replicas sharing the GPU

The model is rlx-serve's demo MLP (``x [N, features] -> relu(x W1 + b1) W2 + b2``) built as an
RLX graph (no onnx needed), served with batching (``--max-batch-size`` rows per run, default
8, ``--batch-wait-ms``). Contenders:

* ``serve xN``: one application per replica count, all deployed at once on a local
  loopback-only cluster (``rlx_serve.start_local``); ``--clients`` threads each keep one
  HTTP connection to 127.0.0.1 and send ``--rows``-row requests (``.npz`` bodies) one after
  the other. On ``cuda`` the replicas of all applications share the one GPU (each asks for
  ``1 / total replicas`` of it), so ``serve x2`` is two processes on one GPU.
* ``loop``: this process compiling the same model for ``--rows`` rows and calling ``run``
  back to back (no server, no batching): what a single process gets.

Rounds alternate the contenders in a shuffled order (``--rounds``, each a burst of
``--requests`` requests), so load from other processes falls on all of them alike. Reported:
requests and rows per second (median over rounds), client-side latency p50 / p99 (over
every request). Client threads share this machine with the servers: on a 2-core host they
take a good part of it, so the figures there are a floor and noisy. Results go to
``benchmarks/results/serve_<device>.json`` and ``.md`` (``--output`` to change).
"""
from __future__ import annotations

import argparse
import http.client
import io
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.append(str(Path(__file__).resolve().parent))  # common.py, also when loaded by path
from common import machine, markdown_table, progress, use_checkout, write_results  # noqa: E402

_before = list(sys.path)
use_checkout()
CHECKOUT_PATHS = [p for p in sys.path if p not in _before]  # for the replicas' PYTHONPATH too

from rlx_core import Session  # noqa: E402
from rlx_core.select import DevicePolicy  # noqa: E402

REQUEST_TIMEOUT_S = 60.0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, ...")
    p.add_argument("--replicas", default="1,2", help="replica counts to compare (default 1,2)")
    p.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    p.add_argument("--requests", type=int, default=200, help="requests per contender per round (default 200)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--rows", type=int, default=1, help="rows per request (default 1)")
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--outputs", type=int, default=16)
    p.add_argument("--max-batch-size", type=int, default=8, help="rows per served graph run (default 8)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    p.add_argument("--output", default=None, help="results name or .json path (default serve_<device>)")
    args = p.parse_args(argv)
    args.replica_counts = [int(n) for n in args.replicas.split(",")]
    if args.rows > args.max_batch_size:
        p.error("--rows must not exceed --max-batch-size")
    return args


class Clients:
    """``n`` threads with one keep-alive HTTP connection each, sending ``.npz`` requests."""

    def __init__(self, n: int, port: int):
        self.n, self.port = n, port
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        return conn

    def one(self, route: str, body: bytes) -> float:
        """Seconds for one request (which must succeed)."""
        t0 = time.perf_counter()
        conn = self._conn()
        conn.request("POST", route, body, {"Content-Type": "application/x-npz"})
        reply = conn.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"{route}: status {reply.status}: {data[:300]!r}")
        return time.perf_counter() - t0

    def burst(self, route: str, bodies: list[bytes]) -> tuple[float, list[float]]:
        """Send every body (``n`` at a time); wall seconds and each request's seconds."""
        latencies: list[float] = []
        lock, it = threading.Lock(), iter(bodies)

        def work():
            while True:
                with lock:
                    body = next(it, None)
                if body is None:
                    return
                took = self.one(route, body)
                with lock:
                    latencies.append(took)
        start = time.perf_counter()
        threads = [threading.Thread(target=work) for _ in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start, latencies


def npz(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x=x)
    return buf.getvalue()


def main(argv=None) -> None:
    args = parse_args(argv)
    import rlx_serve
    from rlx_serve.demo import mlp_graph, mlp_weights
    from rlx_serve.local import start_local, stop_local
    from rlx_serve.model import Batching

    weights = mlp_weights(args.features, args.hidden, args.outputs)
    total = sum(args.replica_counts)
    gpu = args.device in ("cuda", "rocm")
    port = 8000 + os.getpid() % 1000
    env = {"RLX_PLUGINS": args.device}  # the replicas load the device's plugin alone
    if CHECKOUT_PATHS:
        env["PYTHONPATH"] = os.pathsep.join(CHECKOUT_PATHS + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    start_local(port=port, num_cpus=max(total, os.cpu_count() or 1), num_gpus=1 if gpu else None,
                runtime_env={"env_vars": env})
    from ray import serve  # after start_local: Ray must first be told to stay on loopback
    try:
        routes = {}
        for n in args.replica_counts:
            progress(f"deploying {n} replica(s) on {args.device}")
            app = rlx_serve.deployment(mlp_graph(args.max_batch_size, weights), weights=weights,
                                       policy=DevicePolicy.only([args.device]), replicas=n,
                                       batching=Batching(args.max_batch_size, args.batch_wait_ms / 1e3),
                                       gpus_per_replica=1 / total if gpu else None, access_log=False,
                                       name=f"bench{n}")
            serve.run(app, name=f"bench{n}", route_prefix=f"/bench{n}")
            routes[f"serve x{n}"] = f"/bench{n}"
        results = measure(args, routes, weights, port)
    finally:
        stop_local()
    report(args, results, argv)


def measure(args, routes: dict[str, str], weights: dict, port: int) -> dict:
    from rlx_serve.demo import mlp_graph
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((args.rows, args.features)).astype(np.float32) for _ in range(args.requests)]
    bodies = [npz(x) for x in xs]
    compiled = Session(args.device).compile(mlp_graph(args.rows, weights))
    compiled.set_params(weights)
    clients = Clients(args.clients, port)

    def loop() -> tuple[float, list[float]]:
        lat = []
        start = time.perf_counter()
        for x in xs:
            t0 = time.perf_counter()
            compiled.run({"x": x})
            lat.append(time.perf_counter() - t0)
        return time.perf_counter() - start, lat

    contenders = {name: (lambda r=route: clients.burst(r, bodies)) for name, route in routes.items()}
    contenders["loop"] = loop
    for fn in contenders.values():  # warm-up: connections, batch queues, caches
        fn()
    walls: dict[str, list[float]] = {name: [] for name in contenders}
    lats: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders)
    shuffle = np.random.default_rng(1).permutation
    for r in range(args.rounds):
        for name in shuffle(order):
            wall, lat = contenders[name]()
            walls[name].append(wall)
            lats[name].extend(lat)
        progress(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{n} {args.requests / walls[n][-1]:.0f} req/s" for n in order))
    out = {}
    for name in order:
        rps = [args.requests / w for w in walls[name]]
        ms = np.array(lats[name]) * 1e3
        out[name] = {"requests_per_s": statistics.median(rps), "rows_per_s": statistics.median(rps) * args.rows,
                     "requests_per_s_rounds": [round(v, 1) for v in rps],
                     "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                     "requests": int(ms.size)}
    return out


def report(args, results: dict, argv=None) -> None:
    config = {k: getattr(args, k) for k in ("device", "clients", "requests", "rounds", "rows", "features", "hidden",
                                            "outputs", "max_batch_size", "batch_wait_ms")}
    data = {"config": config, "results": results, "machine": machine()}
    first = next(iter(results))
    rows = [(name, f"{r['requests_per_s']:.0f}", f"{r['rows_per_s']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
             f"{r['requests_per_s'] / results[first]['requests_per_s']:.2f}x")
            for name, r in results.items()]
    cores, load = data["machine"]["cpus"], data["machine"].get("load_average_1_5_15min", ["?"])[0]
    command = " ".join(["python benchmarks/serve_bench.py", *(argv if argv is not None else sys.argv[1:])])
    md = (f"Serving the demo MLP ({args.features}-{args.hidden}-{args.outputs}, {args.rows} row(s) per request) on "
          f"{args.device}: {args.clients} HTTP clients (.npz bodies) against Ray Serve replicas batching up to "
          f"{args.max_batch_size} rows ({args.batch_wait_ms:g} ms wait), and one process calling `run` in a loop; "
          f"{args.rounds} interleaved rounds of {args.requests} requests, {cores} cores shared by clients and "
          f"servers, load average {load} at the end (`{command}`).\n\n"
          + markdown_table(["contender", "requests/s", "rows/s", "p50 ms", "p99 ms", f"vs {first}"], rows))
    target = Path(args.output) if args.output and args.output.endswith(".json") else args.output
    json_path, md_path = write_results(target or f"serve_{args.device}", data, md)
    print(md)
    progress(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()

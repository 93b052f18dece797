"""A replica's metrics, on Ray's metrics (``ray.serve.metrics``: Serve adds the application,
deployment and replica tags; Ray's metrics agent exports them for Prometheus on the node)
and kept locally too, for ``stats()`` and the tests:

* ``rlx_serve_requests`` (counter; tags ``device``, ``status``): requests answered, by the
  device that ran them (``none`` for a failure) and HTTP-like status (200, 400, 503 ...);
* ``rlx_serve_request_latency_ms`` (histogram; tag ``device``): arrival at the replica to
  answer, batching wait included;
* ``rlx_serve_fallbacks`` (counter; tags ``failed``, ``device``): graph runs that a failing
  device handed on through the router's fallback chain, and who served them;
* ``rlx_serve_batch_rows`` (histogram): rows per graph run when batching.
"""
from __future__ import annotations

import collections
import threading

import numpy as np

__all__ = ["ReplicaMetrics", "LATENCY_BOUNDARIES_MS"]

LATENCY_BOUNDARIES_MS = [0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
WINDOW = 4096  # latencies kept for the local percentiles


class ReplicaMetrics:
    def __init__(self):
        from ray.serve import metrics
        self._requests = metrics.Counter("rlx_serve_requests", description="Requests answered by RLX replicas",
                                         tag_keys=("device", "status"))
        self._latency = metrics.Histogram("rlx_serve_request_latency_ms", description="Request latency in a replica",
                                          boundaries=LATENCY_BOUNDARIES_MS, tag_keys=("device",))
        self._fallbacks = metrics.Counter("rlx_serve_fallbacks", description="Graph runs a failing device handed on",
                                          tag_keys=("failed", "device"))
        self._rows = metrics.Histogram("rlx_serve_batch_rows", description="Rows per batched graph run",
                                       boundaries=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
        self._lock = threading.Lock()
        self.requests: collections.Counter[tuple[str, int]] = collections.Counter()
        self.fallbacks: collections.Counter[tuple[str, str]] = collections.Counter()
        self._latencies: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.runs = 0

    def request(self, device: str | None, status: int, seconds: float) -> None:
        device = device or "none"
        self._requests.inc(tags={"device": device, "status": str(status)})
        if status == 200:
            self._latency.observe(seconds * 1e3, tags={"device": device})
        with self._lock:
            self.requests[(device, status)] += 1
            if status == 200:
                self._latencies.append(seconds)

    def run(self, device: str, attempts, rows: int | None) -> None:
        """One graph run: the devices that failed before ``device`` served it."""
        for failed, _ in attempts:
            self._fallbacks.inc(tags={"failed": failed, "device": device})
        if rows is not None:
            self._rows.observe(rows)
        with self._lock:
            self.runs += 1
            for failed, _ in attempts:
                self.fallbacks[(failed, device)] += 1

    def snapshot(self) -> dict:
        with self._lock:
            lat = np.array(self._latencies) * 1e3
            served, failures = collections.Counter(), collections.Counter()
            for (device, status), n in self.requests.items():
                if status == 200:
                    served[device] += n
                else:
                    failures[str(status)] += n
            return {"requests": sum(self.requests.values()), "served": dict(served), "failures": dict(failures),
                    "fallbacks": [{"failed": f, "device": d, "runs": n} for (f, d), n in self.fallbacks.items()],
                    "runs": self.runs,
                    "latency_ms": {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
                                   "n": int(lat.size)} if lat.size else {"n": 0}}

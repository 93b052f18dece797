"""The model deployment: each replica holds one ``DeviceRouter`` over the graph.

A replica is placed by Ray with the resources its policy asks for (see
``rlx_serve.app.replica_resources``); with ``num_gpus`` Ray makes its GPU the only one the
process sees, so the router's ``cuda`` is the device Ray gave this replica. The router
compiles on every device the policy allows when the replica starts, and the replica runs
the graph once before it takes requests: a replica that cannot run never joins.

Each request is checked against the signature first (a bad one is answered alone, never
spoiling a batch), then run through the router's fallback chain: a device that fails hands
the run to the next one, and the answer says so (``Prediction.fallback``, the
``rlx_serve_fallbacks`` metric, a warning in the replica's log). Failures come back as a
``RequestError`` value, not an exception, so that they cross Ray unchanged.

Runs are serialized per replica (one device each; the router also serializes per device)
and happen in a worker thread, so the replica's event loop keeps gathering the next batch.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any, Mapping

import numpy as np

from rlx_core.select import DevicePolicy, DeviceRouter

from .errors import RequestError, as_request_error
from .local import keep_replica_server_on_loopback
from .metrics import ReplicaMetrics
from .model import ModelSpec
from .reply import Prediction

__all__ = ["ModelReplica"]

log = logging.getLogger("rlx.serve")


class ModelReplica:
    """One replica of the model deployment (wrapped by ``serve.deployment`` in
    :func:`rlx_serve.deployment`)."""

    def __init__(self, spec: ModelSpec, policy: DevicePolicy):
        from ray import serve
        keep_replica_server_on_loopback()
        self.signature = spec.signature
        self.router = DeviceRouter(spec.graph(), policy, params=spec.params)
        self.metrics = ReplicaMetrics()
        self._lock = threading.Lock()
        context = serve.get_replica_context()
        self.replica = str(context.replica_id.unique_id) if context is not None else f"pid-{os.getpid()}"
        self._run(self.signature.probe(), None)  # compile (done by the router) and run once
        self._batched = None
        if spec.batching is not None:
            self._batched = serve.batch(max_batch_size=spec.batching.max_batch_size,
                                        batch_wait_timeout_s=spec.batching.wait_timeout_s)(self._run_batch)

    async def predict(self, inputs: Mapping[str, Any]) -> "Prediction | RequestError":
        """Run one request (batched with others when the model batches)."""
        start = time.perf_counter()
        try:
            feeds = self.signature.check(inputs)
            if self._batched is not None:
                reply = await self._batched(feeds)
            else:
                reply = (await asyncio.to_thread(self._run, feeds, None))[0]
        except Exception as e:  # noqa: BLE001 -- every failure is answered, with its status
            reply = as_request_error(e)
        if isinstance(reply, RequestError):
            self.metrics.request(None, reply.status, time.perf_counter() - start)
        else:
            self.metrics.request(reply.device, 200, time.perf_counter() - start)
        return reply

    async def _run_batch(self, requests: list[dict[str, np.ndarray]]) -> list["Prediction | RequestError"]:
        """``serve.batch``'s handler: pack the gathered requests into full-batch runs."""
        return await asyncio.to_thread(self._run_packed, requests)

    def _run_packed(self, requests: list[dict[str, np.ndarray]]) -> list["Prediction | RequestError"]:
        replies: list[Prediction | RequestError] = [None] * len(requests)  # type: ignore[list-item]
        for run in self.signature.pack(requests):
            try:
                parts = self._run(run.feeds, run.rows)
            except Exception as e:  # noqa: BLE001 -- answered to every request of this run
                parts = [as_request_error(e)] * len(run.members)
            for i, part in zip(run.members, parts):
                replies[i] = part
        return replies

    def _run(self, feeds: dict[str, np.ndarray], rows: tuple[int, ...] | None) -> list[Prediction]:
        """One graph run through the fallback chain; its outputs cut into ``rows`` (None:
        one request of the full dims)."""
        with self._lock:
            device, outs = self.router.run_chain(feeds)
            record = self.router.runner.last_run
            outputs = outs.as_dict()
            parts = (self.signature.split(outputs, rows) if rows is not None
                     else [{k: np.array(v, copy=True) for k, v in outputs.items()}])
        attempts = record.attempts if record is not None else ()
        if attempts:
            log.warning("replica %s: %s failed, run served by %s", self.replica,
                        "; ".join(f"{d} ({e})" for d, e in attempts), device)
        self.metrics.run(str(device), attempts, sum(rows) if rows is not None else None)
        return [Prediction(part, str(device), self.replica, os.getpid(), attempts) for part in parts]

    async def check_health(self) -> None:
        """Serve's periodic health check: compile (if the router dropped its graphs) and run
        once through the fallback chain; raising marks the replica unhealthy and Serve
        replaces it."""
        await asyncio.to_thread(self._run, self.signature.probe(), None)

    def stats(self) -> dict:
        """Counts, latency percentiles and the devices of this replica."""
        import ray
        return {"replica": self.replica, "pid": os.getpid(), "devices": [str(d) for d in self.router.devices()],
                "accelerators": ray.get_runtime_context().get_accelerator_ids(), **self.metrics.snapshot()}

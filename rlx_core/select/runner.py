"""GraphDevices: one graph, run on whichever device a request wants, compiled lazily.

Parameters set on the runner are kept and mirrored to every compiled device, including
ones compiled later, so outputs agree across devices. Runs on one device are
serialized (backends reuse their buffers between runs); runs on different devices may
proceed in parallel, so a runner is safe to share between threads.

Fallback: ``run_try`` / ``run_chain`` try devices in order. A device that cannot run
the graph here, fails to compile, or raises while running is recorded and the next one
is tried (the original only fell back on compile errors); when all fail,
:class:`DeviceFallbackError` lists every attempt. Bad inputs or params are the caller's
mistake, the same on every device: they raise at once instead of falling back. Every
fallback is logged (logger ``rlx.select``, WARNING) and each run leaves a
:class:`RunRecord` saying which device served it.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import DeviceFallbackError, InputError, ParamError, PolicyError
from ..ir.graph import Graph
from ..runtime.device import Device, parse_device
from ..runtime.options import CompileOptions
from ..runtime.registry import registry
from ..runtime.session import CompiledGraph, Outputs, check_value, compile_graph, require_graph, value_from_bytes
from .calibration import forget_graph_timings, record_graph_timings
from .devices import (FULL, Blocker, DeviceCandidate, DevicePick, blocker_for, device_report, devices_for,
                      nothing_viable_error, pick_device, rank_devices, requested_device)
from .policy import DevicePolicy

__all__ = ["GraphDevices", "DeviceBenchResult", "RunRecord", "benchmark_devices"]

log = logging.getLogger("rlx.select")
# Errors that are the caller's fault and identical on every device: never fall back on them.
CALLER_ERRORS = (InputError, ParamError)


@dataclass(frozen=True)
class DeviceBenchResult:
    """Timing of one device: compile time (0 if it was already compiled) and run times
    in ns over ``runs`` timed runs after one untimed warm-up. ``error`` when it failed."""

    device: Device
    label: str
    compile_ns: int
    median_ns: float | None
    min_ns: float | None
    runs: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class RunRecord:
    """Which device served a run, and what was tried before it (``(device, error)``)."""

    device: Device
    method: str
    seconds: float
    attempts: tuple[tuple[str, str], ...] = ()

    @property
    def fell_back(self) -> bool:
        return bool(self.attempts)


@dataclass
class _Slot:
    """One device's compiled graph, guarded by its own lock."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    compiled: CompiledGraph | None = None


class GraphDevices:
    """A graph plus a lazy per-device compile cache.

    ``policy`` None reads :meth:`DevicePolicy.from_env`. ``options`` are the compile
    options for every device. ``history`` keeps the last ``history_size`` RunRecords;
    ``served`` counts runs per device label.
    """

    def __init__(self, graph: Graph, policy: DevicePolicy | None = None, *, options: CompileOptions | None = None,
                 calibrate: bool = True, history_size: int = 256):
        require_graph(graph, type(self).__name__)
        self.graph = graph.verify()
        self.options = options or CompileOptions()
        self.calibrate = calibrate
        self._policy = policy if policy is not None else DevicePolicy.from_env()
        self._params: dict[str, np.ndarray] = {}
        self._slots: dict[Device, _Slot] = {}
        self._lock = threading.RLock()  # never held while taking a slot's lock
        self._pick_lock = threading.Lock()  # serializes the one-time benchmark pick
        self._pick: DevicePick | None = None
        self._devices: list[Device] | None = None
        self._ranked: list[Device] | None = None
        self.history: collections.deque[RunRecord] = collections.deque(maxlen=history_size)
        self.served: collections.Counter[str] = collections.Counter()

    @classmethod
    def from_env(cls, graph: Graph, **kw) -> "GraphDevices":
        return cls(graph, DevicePolicy.from_env(), **kw)

    # --- policy and introspection ----------------------------------------------------------
    @property
    def policy(self) -> DevicePolicy:
        return self._policy

    def set_policy(self, policy: DevicePolicy) -> None:
        """Switch policy; drops compiled graphs and the benchmark pick."""
        self._policy = policy
        self.invalidate_cache()

    def devices(self) -> list[Device]:
        """Devices that can run this graph under the policy (policy order); computed once."""
        with self._lock:
            if self._devices is None:
                self._devices = devices_for(self.graph, self._policy, FULL, self.options)
            return list(self._devices)

    def report(self, *, probe: str = FULL) -> list[DeviceCandidate]:
        return device_report(self.graph, self._policy, probe=probe, calibrate=self.calibrate, options=self.options)

    def fastest(self) -> Device:
        """The pick of :func:`rank_devices` among :meth:`devices` (no compile): the cost
        model, software devices after the others, or measured times once every device has
        one for this graph."""
        return self.ranked()[0]

    def ranked(self) -> list[Device]:
        """:meth:`devices` in pick order (:func:`rank_devices`); computed once (again after a
        benchmark)."""
        with self._lock:
            if self._ranked is not None:
                return list(self._ranked)
        devices = self.devices()
        if not devices:
            raise nothing_viable_error(self.graph, self._policy, self.options)
        ranked = devices if len(devices) == 1 else [
            d for d, _ in rank_devices(self.graph, devices, self._policy, calibrate=self.calibrate,
                                       options=self.options)]
        with self._lock:
            self._ranked = ranked
        return list(ranked)

    def resolve(self, hint: "Device | str | None" = None, inputs: Mapping[str, Any] | None = None) -> Device:
        """hint -> ``PREFIX_DEVICE`` -> pick strategy (see :meth:`pick`)."""
        return self.pick(hint, inputs).device

    def pick(self, hint: "Device | str | None" = None, inputs: Mapping[str, Any] | None = None) -> DevicePick:
        """The device and why, as :func:`~rlx_core.select.devices.pick_device` decides (the
        same code path as every other entry point), with this runner's viable devices, and
        its :meth:`benchmark` on ``inputs`` for a benchmark policy: the first such pick times
        every device not yet timed on this graph, later ones reuse the times. The pick is
        cached until :meth:`invalidate_cache`; a hint is checked against the cached viable
        devices (no probe per run)."""
        requested = requested_device(hint, self._policy)
        if requested is not None:
            dev, context = requested
            block = self._blocker(dev)
            if block is not None:
                raise block.error(dev, context)
            return DevicePick(dev, "requested" if hint is not None else "environment",
                              "requested" if hint is not None else context)
        with self._lock:
            if self._pick is not None:
                return self._pick
        benchmark = self._policy.benchmark_runs and inputs is not None
        with self._pick_lock:
            with self._lock:
                if self._pick is not None:
                    return self._pick
            measure = (lambda devices: {r.device: r.median_ns if r.ok else float("inf")
                                        for r in self.benchmark(inputs, self._policy.benchmark_runs, devices)}
                       ) if benchmark else None
            chosen = pick_device(self.graph, None, self._policy, options=self.options, calibrate=self.calibrate,
                                 measure=measure, candidates=self.devices())
            if chosen.how == "benchmark":
                log.info("benchmark pick for graph '%s': %s", self.graph.name, chosen.device)
            # Without inputs a benchmark policy falls back to the cost model for now: not final.
            if not self._policy.benchmark_runs or chosen.how != "cost model":
                with self._lock:
                    self._pick = chosen
            return chosen

    def resolve_chain(self, hint: "Device | str | None" = None) -> list[Device]:
        """The devices ``run_chain`` tries: the hint alone; else ``PREFIX_DEVICE_CHAIN``; else
        the resolved device followed by the other viable ones, fastest first."""
        if hint is not None:
            return [parse_device(hint)]
        chain = list(self._policy.device_chain())
        if chain:
            return chain
        first = self.resolve()
        return [first] + [d for d in self.ranked() if d != first]

    # --- params ----------------------------------------------------------------------------
    def set_param(self, name: str, value: Any) -> None:
        """Keep ``value`` for param ``name`` and upload it to every compiled device."""
        node = self._param_node(name)
        arr = check_value(node, value, ParamError, "param", device_arrays=False)
        with self._lock:
            self._params[name] = np.array(arr, copy=True)
            slots = list(self._slots.items())
        for _, slot in slots:
            with slot.lock:
                if slot.compiled is not None:
                    slot.compiled.set_param(name, self._params[name])

    def set_params(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            self.set_param(name, value)

    def set_param_typed(self, name: str, data: bytes, dtype) -> None:
        """``set_param`` from raw bytes of ``dtype`` (converted to the declared dtype)."""
        self.set_param(name, value_from_bytes(self._param_node(name), data, dtype, ParamError, "param"))

    def sync_params_to_all(self) -> None:
        """Upload every kept param to every compiled device again."""
        with self._lock:
            slots = list(self._slots.values())
        for slot in slots:
            with slot.lock:
                if slot.compiled is not None:
                    slot.compiled.set_params(self._params)

    def _param_node(self, name: str):
        params = {n.attrs["name"]: n for n in self.graph.param_nodes}
        if name not in params:
            raise ParamError(f"graph '{self.graph.name}' has no param named {name!r}; "
                             f"its params: {', '.join(params) or 'none'}")
        return params[name]

    # --- compile -----------------------------------------------------------------------------
    def compile(self, device: "Device | str") -> CompiledGraph:
        """The compiled graph for ``device`` (compiled on first use, params replayed)."""
        dev = parse_device(device)
        slot = self._slot(dev)
        with slot.lock:
            if slot.compiled is None:
                block = self._blocker(dev)
                if block is not None:
                    raise block.error(dev, f"graph '{self.graph.name}'")
                compiled = compile_graph(registry().backend(dev), self.graph, self.options, dev)
                compiled.set_params(self._params)
                slot.compiled = compiled
            return slot.compiled

    def _blocker(self, dev: Device) -> Blocker | None:
        """None for a device of a viable kind (cached: no probe per run), else why not."""
        if Device(dev.label) in self.devices():
            return None
        return blocker_for(self.graph, dev, self._policy, FULL, self.options)

    def _slot(self, dev: Device) -> _Slot:
        with self._lock:
            return self._slots.setdefault(dev, _Slot())

    def compiled_devices(self) -> list[Device]:
        with self._lock:
            return [d for d, s in self._slots.items() if s.compiled is not None]

    def warm_all(self) -> list[Device]:
        """Compile every viable device now; returns those that compiled. A device that fails
        to compile is logged and skipped; DeviceFallbackError if none compiled."""
        ok, failed = [], []
        for dev in self.devices():
            try:
                self.compile(dev)
                ok.append(dev)
            except Exception as e:
                if isinstance(e, CALLER_ERRORS):
                    raise
                log.warning("warming graph '%s' on %s failed: %s: %s", self.graph.name, dev, type(e).__name__, e)
                failed.append((str(dev), e))
        if not ok and failed:
            raise DeviceFallbackError(failed)
        return ok

    def invalidate_cache(self) -> None:
        """Drop every compiled graph, the viable devices, their ranking, the pick and the
        graph's measured run times (params stay)."""
        with self._lock:
            self._slots.clear()
            self._devices = None
            self._ranked = None
            self._pick = None
        forget_graph_timings(self.graph, self.options)

    # --- runs ----------------------------------------------------------------------------------
    def run(self, device: "Device | str", inputs: Mapping[str, Any] | None = None) -> Outputs:
        """Run on ``device`` (compiling it first if needed)."""
        dev = parse_device(device)
        start = time.perf_counter()
        out = self._run_on(dev, inputs)
        self._record(RunRecord(dev, "run", time.perf_counter() - start))
        return out

    def run_resolved(self, inputs: Mapping[str, Any] | None = None, device: "Device | str | None" = None
                     ) -> Outputs:
        """Run on :meth:`resolve` (device hint, ``PREFIX_DEVICE``, then the policy's pick,
        benchmarking on these inputs the first time if the policy says so)."""
        dev = self.resolve(device, inputs)
        start = time.perf_counter()
        out = self._run_on(dev, inputs)
        self._record(RunRecord(dev, "run_resolved", time.perf_counter() - start))
        return out

    run_resolved_with_inputs = run_resolved  # the seed's name; inputs always reach the pick here

    def run_try(self, chain: Iterable["Device | str"], inputs: Mapping[str, Any] | None = None
                ) -> tuple[Device, Outputs]:
        """Try ``chain`` in order; ``(device, outputs)`` of the first that works."""
        return self._try(list(chain), inputs, "run_try")

    def run_chain(self, inputs: Mapping[str, Any] | None = None, hint: "Device | str | None" = None
                  ) -> tuple[Device, Outputs]:
        """``run_try`` over :meth:`resolve_chain`."""
        return self._try(self.resolve_chain(hint), inputs, "run_chain")

    def _try(self, chain: list, inputs, method: str) -> tuple[Device, Outputs]:
        start = time.perf_counter()
        if not chain:
            raise DeviceFallbackError([("(none)", PolicyError("empty fallback chain"))])
        attempts: list[tuple[str, BaseException]] = []
        for item in chain:
            dev = parse_device(item)
            try:
                out = self._run_on(dev, inputs)
            except CALLER_ERRORS:
                raise
            except Exception as e:
                attempts.append((str(dev), e))
                log.warning("graph '%s': device %s failed (%s: %s); falling back", self.graph.name, dev,
                            type(e).__name__, e)
                continue
            self._record(RunRecord(dev, method, time.perf_counter() - start,
                                   tuple((d, f"{type(e).__name__}: {e}") for d, e in attempts)))
            if attempts:
                log.warning("graph '%s' served by %s after %d failed attempt(s)", self.graph.name, dev,
                            len(attempts))
            return dev, out
        raise DeviceFallbackError(attempts)

    def _run_on(self, dev: Device, inputs) -> Outputs:
        slot = self._slot(dev)
        with slot.lock:
            return self.compile(dev).run(inputs)

    def _record(self, record: RunRecord) -> None:
        with self._lock:
            self.history.append(record)
            self.served[str(record.device)] += 1

    @property
    def last_run(self) -> RunRecord | None:
        with self._lock:
            return self.history[-1] if self.history else None

    # --- benchmark -------------------------------------------------------------------------------
    def benchmark(self, inputs: Mapping[str, Any] | None = None, runs: int = 20,
                  devices: Iterable["Device | str"] | None = None) -> list[DeviceBenchResult]:
        """Time every viable device (or ``devices``); fastest median first, failures last.

        The medians (``inf`` for a failure) are recorded as this graph's measured run times
        (:func:`~rlx_core.select.calibration.record_graph_timings`): once every viable device
        has one, picks follow them (see ``rank_devices``)."""
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise PolicyError(f"benchmark needs runs >= 1, got {runs!r}")
        targets = [parse_device(d) for d in devices] if devices is not None else self.devices()
        results = [self._bench_one(dev, inputs, runs) for dev in targets]
        record_graph_timings(self.graph, {r.device: r.median_ns if r.ok else float("inf") for r in results},
                             self.options)
        with self._lock:
            self._ranked = None
            if self._pick is not None and self._pick.how not in ("requested", "environment", "only"):
                self._pick = None
        return sorted(results, key=lambda r: (r.median_ns is None, r.median_ns or 0.0))

    def _bench_one(self, dev: Device, inputs, runs: int) -> DeviceBenchResult:
        t0 = time.perf_counter_ns()
        try:
            compiled = self.compile(dev)
            compile_ns = time.perf_counter_ns() - t0
            times = []
            with self._slot(dev).lock:
                compiled.run(inputs)
                for _ in range(runs):
                    t = time.perf_counter_ns()
                    compiled.run(inputs)
                    times.append(time.perf_counter_ns() - t)
        except CALLER_ERRORS:
            raise
        except Exception as e:
            return DeviceBenchResult(dev, dev.label, time.perf_counter_ns() - t0, None, None, 0,
                                     f"{type(e).__name__}: {e}")
        return DeviceBenchResult(dev, dev.label, compile_ns, float(np.median(times)), float(min(times)), runs)

    def __repr__(self) -> str:
        return (f"GraphDevices('{self.graph.name}', policy=[{self._policy.describe()}], "
                f"compiled={[str(d) for d in self.compiled_devices()]})")


def benchmark_devices(graph: Graph, inputs: Mapping[str, Any] | None = None, *, params: Mapping[str, Any] | None = None,
                      policy: DevicePolicy | None = None, runs: int = 20,
                      devices: Iterable["Device | str"] | None = None) -> list[DeviceBenchResult]:
    """Compile ``graph`` on every viable device (or ``devices``) and time ``runs`` runs each."""
    runner = GraphDevices(graph, policy)
    runner.set_params(params or {})
    return runner.benchmark(inputs, runs, devices)

"""FlexibleSession (pick the device at compile time) and DeviceRouter (serving).

``DeviceRouter`` compiles the graph on every viable device when it is built, so no
request pays a first compile, then routes each run. With ``rebench_on_throttle`` it
polls the host's thermal state (:func:`rlx_core.hw.read_thermal`, at most once per
``throttle_check_s``) and, when the state changes between nominal and throttled in
either direction, drops its compiled graphs and benchmark pick and warms everything
again, so the next pick is made under the new conditions. (The original re-warmed on
every run while throttled, and polled a full hardware snapshot each time.) Where the
thermal state is unknown nothing is ever re-warmed.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from ..ir.graph import Graph
from ..runtime.device import Device, parse_device
from ..runtime.options import CompileOptions, PrecisionPolicy
from ..runtime.registry import registry
from ..runtime.session import CompiledGraph, Outputs, compile_graph, require_graph
from ..hw.snapshot import ThermalState, read_thermal
from .devices import FULL, blocker_for, resolve_device
from .policy import DevicePolicy
from .runner import GraphDevices

__all__ = ["FlexibleSession", "DeviceRouter"]

log = logging.getLogger("rlx.select")


class FlexibleSession:
    """Like ``Session``, but the device is chosen per graph: a hint, ``PREFIX_DEVICE``, or
    the cost model, always within ``policy`` (None: from the environment)."""

    def __init__(self, policy: DevicePolicy | None = None, *, precision: "PrecisionPolicy | str | None" = None,
                 options: CompileOptions | None = None):
        self.policy = policy if policy is not None else DevicePolicy.from_env()
        self.options = options or CompileOptions()
        if precision is not None:
            self.options = self.options.with_(precision=PrecisionPolicy.of(precision))

    @classmethod
    def from_env(cls, **kw) -> "FlexibleSession":
        return cls(DevicePolicy.from_env(), **kw)

    def resolve(self, graph: Graph, device: "Device | str | None" = None) -> Device:
        require_graph(graph, "FlexibleSession.resolve")
        return resolve_device(graph, device, self.policy, options=self.options)

    def compile_resolved(self, graph: Graph, device: "Device | str | None" = None,
                         options: CompileOptions | None = None) -> CompiledGraph:
        """Compile on the device :meth:`resolve` picks."""
        return self.compile_on(graph, self.resolve(graph, device), options)

    def compile_on(self, graph: Graph, device: "Device | str", options: CompileOptions | None = None
                   ) -> CompiledGraph:
        """Compile on ``device``, which must be available, allowed by the policy and able to
        run ``graph`` (else the error says which and what to change)."""
        require_graph(graph, "FlexibleSession.compile_on")
        dev = parse_device(device)
        options = options or self.options
        block = blocker_for(graph, dev, self.policy, FULL, options)
        if block is not None:
            raise block.error(dev, f"compiling graph '{graph.name}'")
        return compile_graph(registry().backend(dev), graph, options, dev)

    def __repr__(self) -> str:
        return f"FlexibleSession(policy=[{self.policy.describe()}], precision={self.options.precision.value})"


class DeviceRouter:
    """Serving wrapper around :class:`GraphDevices`: warm on construction, then ``run``,
    ``run_chain``, ``run_on``; safe to call from many threads.

    ``thermal`` reads the thermal state (default: the host's); tests pass their own.
    """

    def __init__(self, graph: Graph, policy: DevicePolicy | None = None, *, params: Mapping[str, Any] | None = None,
                 options: CompileOptions | None = None, rebench_on_throttle: bool = True,
                 throttle_check_s: float = 1.0, thermal: Callable[[], ThermalState] = read_thermal):
        self.runner = GraphDevices(graph, policy, options=options)
        self.runner.set_params(params or {})
        self.rebench_on_throttle = rebench_on_throttle
        self.throttle_check_s = throttle_check_s
        self._thermal = thermal
        self._thermal_lock = threading.Lock()
        self._last_check = time.monotonic()
        self._throttled = thermal().is_throttled if rebench_on_throttle else False
        self.rewarms = 0
        self.runner.warm_all()

    @classmethod
    def from_env(cls, graph: Graph, **kw) -> "DeviceRouter":
        return cls(graph, DevicePolicy.from_env(), **kw)

    def with_rebench_on_throttle(self, enabled: bool) -> "DeviceRouter":
        self.set_rebench_on_throttle(enabled)
        return self

    def set_rebench_on_throttle(self, enabled: bool) -> None:
        self.rebench_on_throttle = bool(enabled)

    # --- delegation -------------------------------------------------------------------------
    def devices(self) -> list[Device]:
        return self.runner.devices()

    def set_param(self, name: str, value: Any) -> None:
        self.runner.set_param(name, value)

    def set_param_typed(self, name: str, data: bytes, dtype) -> None:
        self.runner.set_param_typed(name, data, dtype)

    # --- runs -------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | None = None, hint: "Device | str | None" = None
            ) -> tuple[Device, Outputs]:
        """Run on the resolved device (hint, ``PREFIX_DEVICE``, policy pick)."""
        self._check_thermal()
        device = self.runner.resolve(hint, inputs)
        return device, self.runner.run(device, inputs)

    def run_chain(self, inputs: Mapping[str, Any] | None = None, hint: "Device | str | None" = None
                  ) -> tuple[Device, Outputs]:
        """Run with fallback (see :meth:`GraphDevices.run_chain`)."""
        self._check_thermal()
        return self.runner.run_chain(inputs, hint)

    def run_on(self, device: "Device | str", inputs: Mapping[str, Any] | None = None) -> Outputs:
        self._check_thermal()
        return self.runner.run(device, inputs)

    def _check_thermal(self) -> None:
        """Re-warm when the thermal state flipped since the last check (rate-limited)."""
        if not self.rebench_on_throttle or time.monotonic() - self._last_check < self.throttle_check_s:
            return
        if not self._thermal_lock.acquire(blocking=False):
            return  # another thread is checking (or re-warming) right now
        try:
            self._last_check = time.monotonic()
            state = self._thermal()
            if state.is_throttled == self._throttled:
                return
            log.warning("thermal state changed to %s; re-warming graph '%s' on every device", state,
                        self.runner.graph.name)
            self._throttled = state.is_throttled
            self.runner.invalidate_cache()
            self.runner.warm_all()
            self.rewarms += 1
        finally:
            self._thermal_lock.release()

    def __repr__(self) -> str:
        return f"DeviceRouter({self.runner!r}, rebench_on_throttle={self.rebench_on_throttle})"

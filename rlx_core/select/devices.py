"""Which devices can run a graph here, which is fastest, and why the others cannot.

A device is *viable* for a graph when, in this order: an installed plugin serves it
(registered), its availability probe passes, the :class:`DevicePolicy` allows it, and
its backend supports every node. The first check that fails is the device's
*blocker*, reported with the exact thing to change.

Decisions where the original was inconsistent:

* Cost ties: devices whose estimates lie within :data:`TIE_TOLERANCE` of the best are
  tied; the policy's ``prefer`` order breaks the tie, then platform priority
  (``DEVICE_PRIORITY``). The original let ``prefer`` order listings only.
* Nothing is picked that cannot run: with no viable device, selection raises an error
  listing every device's blocker (the original returned a fallback device anyway).
* ``PREFIX_DEVICE`` (e.g. ``RLX_DEVICE``) is a hint like an explicit one: if that device
  cannot run the graph, resolution raises naming the variable (the original ignored it
  silently). For "use X if it works, else pick", set ``RLX_DEVICE_CHAIN``.
* Introspection (``device_report``) uses each plugin's cheap probe and never
  calibrates; selection (``fastest_device_for``) uses full probes and calibrates the
  candidates once when there are two or more to choose between.

Plugins: ``BackendFactory.create()`` and ``advisory_capabilities()`` must not import a
heavy library (import it in ``is_available`` or ``compile``): the report calls them for
every registered device. Given a graph, the report also asks each available backend for
``supported_ops()``; a plugin whose table depends on the hardware (wgpu: adapter
features) pays for its import there, and only there.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from ..errors import DeviceUnavailableError, PluginError, PolicyError
from ..ir.graph import Graph
from ..passes.legalize import unsupported_nodes
from ..passes.precision import apply_precision
from ..runtime.device import Device, known_devices, parse_device
from ..runtime.options import CompileOptions
from ..runtime.registry import BackendEntry, install_hint, registry
from .calibration import device_figures
from .cost import graph_cost, estimate_ns
from .policy import DevicePolicy

if TYPE_CHECKING:
    from .cost import GraphCost

__all__ = ["Blocker", "DeviceCandidate", "available_devices", "is_available", "blocker_for", "devices_for",
           "rank_devices", "estimate_device_ns", "fastest_device_for", "resolve_device", "device_report",
           "nothing_viable_error", "checked_hint", "requested_device", "TIE_TOLERANCE", "FULL",
           "CHEAP"]

log = logging.getLogger("rlx.select")
TIE_TOLERANCE = 0.05
FULL, CHEAP = "full", "cheap"
# Blocker kinds, in the order they are checked.
UNREGISTERED, UNAVAILABLE, POLICY, UNSUPPORTED = "unregistered", "unavailable", "policy", "unsupported"
# How to get a device served (pip command, or the error of its installed plugin that failed to
# load): rlx_core.runtime.registry.install_hint, the one place that says it.


@dataclass(frozen=True)
class Blocker:
    """Why a device cannot run a graph here, and what to change."""

    kind: str
    reason: str
    fix: str
    offending: tuple[tuple[str, str], ...] = ()

    def error(self, device: Device, context: str) -> Exception:
        """The exception to raise when ``context`` (e.g. ``"RLX_DEVICE=cuda"``) asked for it."""
        cls = PolicyError if self.kind == POLICY else DeviceUnavailableError
        return cls(f"{context}: device '{device}' cannot be used: {self.reason}. To change it: {self.fix}")


@dataclass(frozen=True)
class DeviceCandidate:
    """One row of :func:`device_report`. ``supports_graph`` is None when not checked
    (no graph given, or the device is blocked earlier). ``capabilities`` are advisory:
    the compiled graph's ``capabilities`` are the truth. ``estimate_ns`` is the cost
    model's prediction of one run, from ``figures`` = ``calibrated`` or ``nominal``."""

    device: Device
    label: str
    registered: bool
    available: bool
    supports_graph: bool | None
    recommended: bool
    blocker: str | None
    fix: str | None
    capabilities: tuple[str, ...] = ()
    backend: str | None = None
    plugin: str | None = None
    detail: str = ""
    estimate_ns: float | None = None
    figures: str | None = None
    blocker_kind: str | None = None  # unregistered | unavailable | policy | unsupported
    offending: tuple[tuple[str, str], ...] = field(default=(), repr=False)


# --- availability ------------------------------------------------------------------------
def _entry(device: Device) -> BackendEntry | None:
    try:
        return registry().entry(device)
    except DeviceUnavailableError:
        return None


def is_available(device: "Device | str", probe: str = FULL) -> bool:
    """Served by a plugin whose probe (``full`` or ``cheap``) passes."""
    entry = _entry(parse_device(device))
    return entry is not None and entry.availability(full=probe == FULL).ok


def available_devices(probe: str = FULL) -> list[Device]:
    """Every served device whose probe passes, in platform priority order."""
    return [d for d in registry().devices() if is_available(d, probe)]


# --- viability ----------------------------------------------------------------------------
def blocker_for(graph: Graph | None, device: "Device | str", policy: DevicePolicy | None = None,
                probe: str = FULL, options: CompileOptions | None = None) -> Blocker | None:
    """The first reason ``device`` cannot run ``graph`` here (graph None: skip that check)."""
    dev = parse_device(device)
    policy = policy if policy is not None else DevicePolicy.from_env()
    entry = _entry(dev)
    if entry is None:
        return Blocker(UNREGISTERED, "no installed plugin serves it", install_hint(dev))
    avail = entry.availability(full=probe == FULL)
    if not avail.ok:
        return Blocker(UNAVAILABLE, f"not available: {avail.reason or 'probe failed'}",
                       f"fix the driver or hardware named above, or exclude the device with "
                       f"{policy.env_prefix}_DENY_DEVICES={dev.label}")
    policy_block = policy.blocker(dev)
    if policy_block:
        return Blocker(POLICY, *policy_block)
    if graph is None:
        return None
    return _support_blocker(graph, dev, entry, policy, options)


def _support_blocker(graph: Graph, dev: Device, entry: BackendEntry, policy: DevicePolicy,
                     options: CompileOptions | None) -> Blocker | None:
    try:
        backend = entry.get()
        lowered = apply_precision(graph, (options or CompileOptions()).precision)
        bad = unsupported_nodes(lowered, backend, registry().op_kernels(backend.name))
    except PluginError as e:
        return Blocker(UNAVAILABLE, f"not available: {e}", "see `rlx devices` for the plugin error")
    if not bad:
        return None
    shown = "; ".join(f"{node}: {why}" for node, why in bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3
                                                                     else "")
    return Blocker(UNSUPPORTED, f"unsupported by backend '{backend.name}': {shown}",
                   f"run it elsewhere ({policy.env_prefix}_DEVICE_CHAIN falls back automatically) or "
                   f"avoid these op kinds", tuple(bad))


def devices_for(graph: Graph, policy: DevicePolicy | None = None, probe: str = FULL,
                options: CompileOptions | None = None) -> list[Device]:
    """Devices that can run ``graph`` under ``policy`` (default: from the environment),
    in the policy's order (prefer list, then platform priority)."""
    policy = policy if policy is not None else DevicePolicy.from_env()
    viable = [d for d in registry().devices() if blocker_for(graph, d, policy, probe, options) is None]
    return policy.order(viable)


# --- ranking -------------------------------------------------------------------------------
def estimate_device_ns(graph: "Graph | GraphCost", device: "Device | str", *, calibrate: bool = False) -> float:
    """The cost model's prediction of one run of ``graph`` on ``device``, in ns."""
    cost = graph_cost(graph) if isinstance(graph, Graph) else graph
    return estimate_ns(cost, device_figures(device, calibrate=calibrate))


def rank_devices(graph: Graph, devices: Iterable["Device | str"], policy: DevicePolicy | None = None, *,
                 calibrate: bool = False) -> list[tuple[Device, float]]:
    """``(device, estimated ns)`` fastest first. Estimates within TIE_TOLERANCE of the best
    remaining one are ties, broken by the policy's prefer order, then platform priority."""
    policy = policy if policy is not None else DevicePolicy.from_env()
    cost = graph_cost(graph)
    remaining = {parse_device(d): estimate_device_ns(cost, d, calibrate=calibrate) for d in devices}
    ranked = []
    while remaining:
        best = min(remaining.values())
        tied = [d for d, t in remaining.items() if t <= best * (1 + TIE_TOLERANCE)]
        winner = min(tied, key=policy.rank_key)
        ranked.append((winner, remaining.pop(winner)))
    return ranked


def fastest_device_for(graph: Graph, policy: DevicePolicy | None = None, *, calibrate: bool = True,
                       options: CompileOptions | None = None) -> Device:
    """The cost model's pick among the viable devices (no compile).

    With two or more candidates, uncalibrated ones are calibrated first (once; cached)
    unless ``calibrate=False``. Raises DeviceUnavailableError, listing every device's
    blocker, when nothing can run the graph.
    """
    policy = policy if policy is not None else DevicePolicy.from_env()
    candidates = devices_for(graph, policy, FULL, options)
    if not candidates:
        raise nothing_viable_error(graph, policy, options)
    if len(candidates) == 1:
        return candidates[0]
    return rank_devices(graph, candidates, policy, calibrate=calibrate)[0][0]


def nothing_viable_error(graph: Graph, policy: DevicePolicy, options: CompileOptions | None = None
                         ) -> DeviceUnavailableError:
    """The error for "no device can run this graph", listing each served device's blocker."""
    rows = []
    for label in known_devices():
        b = blocker_for(graph, label, policy, FULL, options)
        if b is not None and b.kind != UNREGISTERED:
            rows.append(f"  {label}: {b.reason} -> {b.fix}")
    served = "\n".join(rows) or f"  (no installed plugin serves any device: {install_hint('cpu')})"
    return DeviceUnavailableError(f"no device can run graph '{graph.name}' under policy [{policy.describe()}]:\n"
                                  f"{served}")


def resolve_device(graph: Graph, hint: "Device | str | None" = None, policy: DevicePolicy | None = None, *,
                   options: CompileOptions | None = None, calibrate: bool = True) -> Device:
    """hint -> ``PREFIX_DEVICE`` -> cost model. A hint (either kind) that cannot run the graph
    raises, naming where it came from. (Benchmark picks need inputs: see GraphDevices.)"""
    policy = policy if policy is not None else DevicePolicy.from_env()
    chosen = checked_hint(graph, hint, policy, options)
    return chosen if chosen is not None else fastest_device_for(graph, policy, calibrate=calibrate,
                                                                options=options)


def checked_hint(graph: Graph, hint: "Device | str | None", policy: DevicePolicy,
                 options: CompileOptions | None = None) -> Device | None:
    """The explicit hint, else ``PREFIX_DEVICE``, validated against ``graph``; None if neither."""
    requested = requested_device(hint, policy)
    if requested is None:
        return None
    dev, context = requested
    block = blocker_for(graph, dev, policy, FULL, options)
    if block is not None:
        raise block.error(dev, context)
    return dev


def requested_device(hint: "Device | str | None", policy: DevicePolicy) -> tuple[Device, str] | None:
    """``(device, where the request came from)`` for the explicit hint, else ``PREFIX_DEVICE``."""
    if hint is not None:
        return parse_device(hint), f"requested device '{hint}'"
    dev = policy.device_hint()
    return None if dev is None else (dev, f"{policy.env_prefix}_DEVICE={dev}")


# --- the report ----------------------------------------------------------------------------
def device_report(graph: Graph | None = None, policy: DevicePolicy | None = None, *, probe: str = CHEAP,
                  calibrate: bool = False, options: CompileOptions | None = None) -> list[DeviceCandidate]:
    """One row per known device: registered, available, allowed, supports ``graph``, the
    blocker with its fix, advisory capabilities, and the cost model's estimate and pick.

    Rows come viable-and-fastest first, then the others in platform priority. Cheap by
    default: cheap probes, no calibration (cached figures are used when present).
    """
    policy = policy if policy is not None else DevicePolicy.from_env()
    blockers = {Device(label): blocker_for(graph, label, policy, probe, options) for label in known_devices()}
    viable = [d for d, b in blockers.items() if b is None]
    ranked = rank_devices(graph, viable, policy, calibrate=calibrate) if graph is not None else []
    estimates = dict(ranked)
    best = ranked[0][0] if ranked else None
    order = [d for d, _ in ranked] + [d for d in blockers if d not in estimates]
    return [_row(d, blockers[d], graph, d == best, estimates.get(d), calibrate, options, probe) for d in order]


def _row(dev: Device, block: Blocker | None, graph: Graph | None, recommended: bool, estimate: float | None,
         calibrate: bool, options: CompileOptions | None, probe: str) -> DeviceCandidate:
    entry = _entry(dev)
    kind = block.kind if block else None
    supports = None if graph is None or kind in (UNREGISTERED, UNAVAILABLE) else kind != UNSUPPORTED
    if kind == POLICY and graph is not None:  # still worth knowing whether it could run it
        supports = _support_blocker(graph, dev, entry, DevicePolicy.all(), options) is None
    caps, detail = (), ""
    if entry is not None:
        detail = entry.availability(full=probe == FULL).reason  # (the full probe names the adapter)
        if entry.backend is not None or kind not in (UNREGISTERED, UNAVAILABLE):
            try:
                caps = tuple(sorted(entry.get().advisory_capabilities()))
            except PluginError:
                caps = ()
    figures = device_figures(dev, calibrate=calibrate).source if estimate is not None else None
    return DeviceCandidate(dev, dev.label, entry is not None, kind not in (UNREGISTERED, UNAVAILABLE), supports,
                           recommended, block.reason if block else None, block.fix if block else None, caps,
                           entry.name if entry else None, entry.plugin if entry else None, detail, estimate,
                           figures, kind, block.offending if block else ())

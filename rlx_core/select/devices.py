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

One pick for every entry point: ``rlx run``, ``rlx bench``, :func:`fastest_device_for`,
:func:`resolve_device`, ``GraphDevices``, ``FlexibleSession``, ``DeviceRouter`` and
``Session()`` without a device all go through :func:`pick_device` (or, in
``GraphDevices``, the same :func:`requested_device` + :func:`rank_devices` with its
results cached), under the same :class:`DevicePolicy` (``DevicePolicy.from_env()``
unless one is given): hint -> ``PREFIX_DEVICE`` -> a benchmark pick when
``PREFIX_BENCHMARK_PICK`` asks for one and inputs are at hand -> :func:`rank_devices`.

Software devices. A device whose availability detail says ``software`` (see
:func:`software_detail`: rlx-wgpu sets it for lavapipe, llvmpipe, SwiftShader, WARP --
any adapter whose type is CPU) emulates a GPU on the host's cores. It is never picked
over a device that is not software on the strength of the cost model alone:
:func:`rank_devices` ranks software devices after every other viable device, and does
not calibrate them for the pick. A wrong pick there costs 10-100x (an MLP ran at 77 ms
per call on lavapipe against 1.5 ms on cpu), while a right one could win little. A
*measurement* overrides this: once every candidate has been timed on this graph in this
process (``GraphDevices.benchmark``, ``rlx bench``, a benchmark pick with
``RLX_BENCHMARK_PICK=N``; kept per graph fingerprint and compile options by
:func:`~rlx_core.select.calibration.record_graph_timings`), the ranking follows the
measured times, so a software device that really is faster wins. The pick does not
benchmark a software device on its own: compiling and running a model there can take
seconds (an encoder layer: 1.83 s per run on lavapipe), more than the pick could save;
``RLX_BENCHMARK_PICK`` is the switch for that. Explicit requests (``--device gpu``,
``RLX_DEVICE=gpu``) still get the software device, and it stays in fallback chains.
When only software devices can run a graph, they are ranked by the cost model as usual.

Plugins: ``BackendFactory.create()`` and ``advisory_capabilities()`` must not import a
heavy library (import it in ``is_available`` or ``compile``): the report calls them for
every registered device. The registry checks ``supported_ops()`` when it creates a backend
(``check_supported_ops``), so a plugin whose table depends on the hardware (wgpu: adapter
features) pays for its import then, also in a cheap report.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from ..errors import DeviceUnavailableError, PluginError, PolicyError
from ..ir.graph import Graph
from ..passes.legalize import unsupported_nodes
from ..passes.precision import apply_precision
from ..runtime.backend import CAPABILITIES
from ..runtime.device import Device, known_devices, parse_device
from ..runtime.options import CompileOptions
from ..runtime.registry import BackendEntry, install_hint, registry
from .calibration import device_figures, graph_timings, load_calibration, record_graph_timings
from .cost import graph_cost, estimate_ns
from .policy import DevicePolicy

if TYPE_CHECKING:
    from .cost import GraphCost

__all__ = ["Blocker", "DeviceCandidate", "advisory_capabilities", "ordered_capabilities", "available_devices",
           "is_available", "blocker_for", "devices_for",
           "rank_devices", "estimate_device_ns", "fastest_device_for", "resolve_device", "device_report",
           "nothing_viable_error", "checked_hint", "requested_device", "TIE_TOLERANCE", "FULL",
           "CHEAP", "DevicePick", "pick_device", "software_detail", "is_software", "software_status",
           "SOFTWARE_ADAPTERS"]

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
    software: bool | None = None  # emulated on the host CPU (None: not known without a full probe)


@dataclass(frozen=True)
class DevicePick:
    """What :func:`pick_device` chose and why.

    ``how``: ``requested`` (an explicit hint), ``environment`` (``PREFIX_DEVICE``),
    ``only`` (one viable device), ``cost model``, ``measured`` (every candidate timed on
    this graph) or ``benchmark`` (timed just now, as the policy asks). ``ranked`` holds the
    candidates in pick order with the cost model's estimates (ns); ``software`` the
    candidates that are software devices, ``demoted`` those ranked after the others
    because of it."""

    device: Device
    how: str
    reason: str
    ranked: tuple[tuple[Device, float], ...] = ()
    software: tuple[Device, ...] = ()
    demoted: tuple[Device, ...] = ()


# --- availability ------------------------------------------------------------------------
def _entry(device: Device) -> BackendEntry | None:
    try:
        return registry().entry(device)
    except DeviceUnavailableError:
        return None


def advisory_capabilities(device: "Device | str") -> tuple[str, ...]:
    """The capability names (``rlx_core.runtime.CAPABILITIES``, in its order: the
    original's ``clone, moe, persistent_handles, gpu_handles, kv_resident, typed_io,
    async_pipeline, active_extent`` first) that the backend serving ``device`` claims for
    the graphs it compiles; empty where no plugin serves it. Advisory: a compiled
    graph's ``capabilities`` are the truth (e.g. wgpu on a unified-memory adapter cannot
    queue runs, so its executables drop ``async_pipeline``)."""
    entry = _entry(parse_device(device))
    if entry is None:
        return ()
    try:
        return ordered_capabilities(entry.get().advisory_capabilities())
    except PluginError:
        return ()


def ordered_capabilities(names) -> tuple[str, ...]:
    """``names`` in the order of ``CAPABILITIES`` (unknown names last, sorted)."""
    known = [c for c in CAPABILITIES if c in names]
    return tuple(known + sorted(set(names) - set(known)))


def is_available(device: "Device | str", probe: str = FULL) -> bool:
    """Served by a plugin whose probe (``full`` or ``cheap``) passes."""
    entry = _entry(parse_device(device))
    return entry is not None and entry.availability(full=probe == FULL).ok


def available_devices(probe: str = FULL) -> list[Device]:
    """Every served device whose probe passes, in platform priority order."""
    return [d for d in registry().devices() if is_available(d, probe)]


# --- software devices ----------------------------------------------------------------------
# Adapter names of GPU drivers that run on the CPU (lower case; matched as words).
SOFTWARE_ADAPTERS = ("lavapipe", "llvmpipe", "softpipe", "swiftshader", "microsoft basic render driver", "warp")
_SOFTWARE_RE = re.compile(r"\b(" + "|".join(re.escape(n) for n in SOFTWARE_ADAPTERS) + r")\b")


def software_detail(detail: Mapping | None) -> bool | None:
    """Whether an availability ``detail`` describes a software device: its ``software`` key
    when the plugin sets one (the contract), else an ``adapter_type`` of ``CPU`` (wgpu's
    name for software adapters) or an adapter/driver name of :data:`SOFTWARE_ADAPTERS`.
    None when the detail says nothing about an adapter (e.g. a cheap probe's)."""
    if not detail:
        return None
    if detail.get("software") is not None:
        return bool(detail["software"])
    if str(detail.get("adapter_type") or "").upper() == "CPU":
        return True
    names = " ".join(str(detail.get(k) or "") for k in ("adapter", "device", "name", "driver")).lower()
    if _SOFTWARE_RE.search(names):
        return True
    return False if detail.get("adapter_type") or names.strip() else None


def software_status(device: "Device | str", probe: str = FULL) -> bool | None:
    """Whether ``device`` is a software device, from its probe's detail, else from its cached
    calibration; None when neither says (a cheap probe of a device never calibrated). The
    ``cpu`` device is what software devices are compared with: never software."""
    dev = parse_device(device)
    if dev.label == "cpu":
        return False
    entry = _entry(dev)
    if entry is None:
        return None
    avail = entry.availability(full=probe == FULL)
    flag = software_detail(avail.detail) if avail.ok else None
    if flag is None:
        calib = load_calibration(dev)
        flag = calib.software if calib is not None else None
    return flag


def is_software(device: "Device | str", probe: str = FULL) -> bool:
    """``software_status`` with unknown counted as not software."""
    return bool(software_status(device, probe))


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
        fix = install_hint(dev) if avail.detail.get("missing") else "fix the driver or hardware named above"
        return Blocker(UNAVAILABLE, f"not available: {avail.reason or 'probe failed'}",
                       f"{fix}, or exclude the device with {policy.env_prefix}_DENY_DEVICES={dev.label}")
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
def estimate_device_ns(graph: "Graph | GraphCost", device: "Device | str", *, calibrate: bool = False,
                       software: bool | None = None) -> float:
    """The cost model's prediction of one run of ``graph`` on ``device``, in ns. ``software``
    None asks the device (a full probe) whether it is a software device, whose nominal
    figures differ."""
    cost = graph_cost(graph) if isinstance(graph, Graph) else graph
    if software is None:
        software = is_software(device)
    return estimate_ns(cost, device_figures(device, calibrate=calibrate, software=software))


def _tie_order(values: Mapping[Device, float], policy: DevicePolicy) -> list[Device]:
    """Lowest value first; values within TIE_TOLERANCE of the best remaining one are ties,
    broken by the policy's prefer order, then platform priority."""
    remaining = dict(values)
    order = []
    while remaining:
        best = min(remaining.values())
        tied = [d for d, t in remaining.items() if t <= best * (1 + TIE_TOLERANCE) or t == best]
        winner = min(tied, key=policy.rank_key)
        order.append(winner)
        del remaining[winner]
    return order


def _ranking(graph: Graph, devices: Iterable["Device | str"], policy: DevicePolicy, calibrate: bool,
             options: CompileOptions | None, probe: str):
    """``(ranked [(device, estimate ns)], how, software, demoted)`` -- see :func:`rank_devices`."""
    devices = list(dict.fromkeys(parse_device(d) for d in devices))
    software = [d for d in devices if is_software(d, probe)]
    hardware = [d for d in devices if d not in software]
    demote = bool(software and hardware)
    cost = graph_cost(graph)
    measured = graph_timings(graph, options)
    complete = bool(devices) and all(d in measured for d in devices)
    # Nothing is calibrated for a pick that measurements decide, nor software devices that
    # rank last anyway (calibrating one can take a minute); their estimates use what is cached.
    estimates = {d: estimate_device_ns(cost, d, calibrate=calibrate and not complete
                                       and not (demote and d in software), software=d in software)
                 for d in devices}
    if complete:
        order = _tie_order({d: measured[d] for d in devices}, policy)
        return [(d, estimates[d]) for d in order], "measured", software, []
    if demote:
        order = (_tie_order({d: estimates[d] for d in hardware}, policy)
                 + _tie_order({d: estimates[d] for d in software}, policy))
        demoted = [d for d in software if estimates[d] <= min(estimates[h] for h in hardware) * (1 + TIE_TOLERANCE)]
    else:
        order, demoted = _tie_order(estimates, policy), []
    return [(d, estimates[d]) for d in order], "cost model", software, demoted


def rank_devices(graph: Graph, devices: Iterable["Device | str"], policy: DevicePolicy | None = None, *,
                 calibrate: bool = False, options: CompileOptions | None = None, probe: str = FULL
                 ) -> list[tuple[Device, float]]:
    """``(device, estimated ns)`` in pick order, best first.

    * When every device in ``devices`` has a measured run time of this graph (see the
      module docstring), the measured times decide the order.
    * Otherwise the cost model's estimates do, except that software devices come after
      every device that is not software (the estimates are still returned).
    * Values within TIE_TOLERANCE of the best remaining one are ties, broken by the
      policy's prefer order, then platform priority.
    """
    policy = policy if policy is not None else DevicePolicy.from_env()
    return _ranking(graph, devices, policy, calibrate, options, probe)[0]


def fastest_device_for(graph: Graph, policy: DevicePolicy | None = None, *, calibrate: bool = True,
                       options: CompileOptions | None = None) -> Device:
    """The pick among the viable devices by :func:`rank_devices` (no compile; a hint or
    ``PREFIX_DEVICE`` is not consulted: see :func:`resolve_device`).

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
    return rank_devices(graph, candidates, policy, calibrate=calibrate, options=options)[0][0]


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
    """hint -> ``PREFIX_DEVICE`` -> :func:`rank_devices`. A hint (either kind) that cannot run
    the graph raises, naming where it came from. (A benchmark pick needs inputs: see
    :func:`pick_device` and ``GraphDevices``.)"""
    return pick_device(graph, hint, policy, options=options, calibrate=calibrate).device


Measure = Callable[[list], Mapping[Device, float]]


def pick_device(graph: Graph, hint: "Device | str | None" = None, policy: DevicePolicy | None = None, *,
                options: CompileOptions | None = None, calibrate: bool = True, measure: Measure | None = None,
                candidates: Iterable[Device] | None = None) -> DevicePick:
    """The device for ``graph``, and why: the one pick every entry point shares.

    1. ``hint``, else ``PREFIX_DEVICE``: used if it can run the graph here, else raises
       (PolicyError / DeviceUnavailableError naming where the request came from).
    2. The viable devices under ``policy`` (default ``DevicePolicy.from_env()``), or
       ``candidates`` when the caller already knows them; none -> DeviceUnavailableError
       listing every device's blocker; one -> that one.
    3. A policy with ``benchmark_runs`` and a ``measure`` callable (devices -> ``{device:
       median ns}``, ``inf`` for failures; ``GraphDevices`` passes its benchmark): the
       candidates not yet timed on this graph are timed, once per graph fingerprint and
       process, and the measured times decide.
    4. :func:`rank_devices`: measured times when every candidate has one, else the cost
       model with software devices after the others.
    """
    policy = policy if policy is not None else DevicePolicy.from_env()
    requested = requested_device(hint, policy)
    if requested is not None:
        dev, context = requested
        block = blocker_for(graph, dev, policy, FULL, options)
        if block is not None:
            raise block.error(dev, context)
        return DevicePick(dev, "requested" if hint is not None else "environment",
                          "requested" if hint is not None else context)
    devices = list(candidates) if candidates is not None else devices_for(graph, policy, FULL, options)
    if not devices:
        raise nothing_viable_error(graph, policy, options)
    if len(devices) == 1:
        return DevicePick(devices[0], "only", f"the only device that can run it under policy [{policy.describe()}]",
                          ((devices[0], math.nan),))
    benchmarked = False
    if policy.benchmark_runs and measure is not None:
        measured = graph_timings(graph, options)
        missing = [d for d in devices if d not in measured]
        if missing:
            record_graph_timings(graph, dict(measure(missing)), options)
            benchmarked = True
    ranked, how, software, demoted = _ranking(graph, devices, policy, calibrate, options, FULL)
    if benchmarked and how == "measured":
        how = "benchmark"
    return DevicePick(ranked[0][0], how, _pick_reason(ranked, how, software, demoted, graph, options, policy),
                      tuple(ranked), tuple(software), tuple(demoted))


def _pick_reason(ranked, how, software, demoted, graph, options, policy) -> str:
    first = ranked[0][0]
    tag = lambda d: " (software device)" if d in software else ""  # noqa: E731
    if how in ("measured", "benchmark"):
        measured = graph_timings(graph, options)
        what = (f"benchmarked just now ({policy.benchmark_runs} runs each)" if how == "benchmark"
                else "measured on this graph")
        others = ", ".join(f"{d} {_fmt_ns(measured[d])}{tag(d)}" for d, _ in ranked[1:])
        return f"fastest {what}: {_fmt_ns(measured[first])}; {others}"
    others = ", ".join(f"{d} {_fmt_ns(t)}{tag(d)}" for d, t in ranked[1:])
    text = f"cost model: est. {_fmt_ns(ranked[0][1])}; {others}"
    if demoted:
        names = ", ".join(map(str, demoted))
        text += (f"; {names} ranked after the other devices: a software adapter is picked only when measured "
                 f"faster on this graph ({policy.env_prefix}_BENCHMARK_PICK=N measures)")
    return text


def _fmt_ns(ns: float) -> str:
    if ns is None or math.isnan(ns):
        return "-"
    if math.isinf(ns):
        return "failed"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


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

    Rows come viable-and-fastest first (the order :func:`rank_devices` picks in), then the
    others in platform priority. Cheap by default: cheap probes, no calibration (cached
    figures are used when present). ``software`` says whether a device is a software
    adapter (known from a full probe, an adapter the process already opened -- checking a
    graph's support opens wgpu's -- or a cached calibration; else None), and the detail
    of one that is says so.
    """
    policy = policy if policy is not None else DevicePolicy.from_env()
    blockers = {Device(label): blocker_for(graph, label, policy, probe, options) for label in known_devices()}
    viable = [d for d, b in blockers.items() if b is None]
    ranked = (rank_devices(graph, viable, policy, calibrate=calibrate, options=options, probe=probe)
              if graph is not None else [])
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
    caps, detail, software = (), "", None
    if entry is not None:
        if entry.backend is not None or kind not in (UNREGISTERED, UNAVAILABLE):
            caps = advisory_capabilities(dev)
        avail = entry.availability(full=probe == FULL)  # (after creating it: a cheap probe may say more)
        detail = avail.reason  # (the full probe names the adapter)
        software = software_status(dev, probe) if avail.ok else None
        if software and "software" not in detail.lower():
            detail = f"{detail} [software: emulated on the host CPU]".strip()
    figures = (device_figures(dev, calibrate=calibrate, software=bool(software)).source if estimate is not None
               else None)
    return DeviceCandidate(dev, dev.label, entry is not None, kind not in (UNREGISTERED, UNAVAILABLE), supports,
                           recommended, block.reason if block else None, block.fix if block else None, caps,
                           entry.name if entry else None, entry.plugin if entry else None, detail, estimate,
                           figures, kind, block.offending if block else (), software)

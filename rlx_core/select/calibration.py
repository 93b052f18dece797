"""Device figures for the cost model: measured once per backend and device, cached as JSON.

Cache file: ``$XDG_CACHE_HOME/rlx/<backend>-calib-<device-id>.json`` (``~/.cache/rlx``
when ``XDG_CACHE_HOME`` is unset), ``<device-id>`` = device label and index plus the
host fingerprint (:meth:`HwSnapshot.fingerprint`). Fields: the seed's ``sgemm_gflops``,
``memory_bw_gbps``, ``roundtrip_overhead_ns``, plus ``dispatch_overhead_ns``,
``vector_gflops``, ``transfer_bw_gbps`` (null: no bus between host and device) and what
identifies the measurement (backend, device, fingerprint, plugin version, format).

Files are written atomically (0600 temporary file + rename, ``rlx_core.runtime.safefs``)
into a folder created 0700. A file that does not parse, lacks a field, holds a figure
that is not a finite number in :data:`PLAUSIBLE` (``Infinity`` or 1e308 GFLOP/s were not
measured here), was written for another format, fingerprint, plugin version or thread
settings (``OMP_NUM_THREADS`` ...), or is not a trusted file (a link, another user's, or
writable by others) is ignored with a warning and re-measured; a cache directory that
cannot be written or trusted only costs the cache (a warning), never the run.

A plugin's figures may say ``"software": true`` (rlx-wgpu does for lavapipe, llvmpipe,
SwiftShader, WARP: adapters that run on the host's cores); it is kept in the file so
that cheap reports know it without opening the device. An uncalibrated software device
gets :data:`NOMINAL_SOFTWARE`, not its platform's GPU figures.

Per-graph timings: :func:`record_graph_timings` keeps measured run times of one graph
(per graph fingerprint and compile options, for this process) -- written by
``GraphDevices.benchmark`` and read by the device ranking (``select/devices.py``).

Measuring: the ``rlx_calibrate`` hook of the plugin serving the backend, if it answers
(per-kind tables it leaves out are added by :func:`measure_kind_costs`); otherwise
:func:`measure_backend`, which times small graphs through the backend itself (so it
works for any backend). Plugins may build on the same helpers and report
progress with :func:`report_progress`. Nothing here calibrates implicitly except
:func:`device_figures` with ``calibrate=True``; without a cache, figures are the
nominal ones in :data:`NOMINAL`.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import DeviceUnavailableError, PluginError, RlxError
from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.schema import get_schema
from ..ir.shape import Shape
from ..runtime.backend import Backend
from ..runtime.device import Device, parse_device
from ..runtime.options import CompileOptions
from ..runtime.safefs import cache_root, private_dir, read_trusted, write_atomic
from .cost import GEMM_KINDS, VIEW_KINDS, DeviceFigures

__all__ = ["Calibration", "NOMINAL", "cache_dir", "calibration_path", "load_calibration", "calibrate",
           "device_figures", "measure_backend", "measure_overheads", "measure_kind_costs", "measure_vector",
           "report_progress", "progress_reporter", "note_cache_read", "clear_memo", "probe_order", "thread_settings",
           "FORMAT_VERSION",
           "NOMINAL_SOFTWARE", "MIN_KINDS_TIMED", "record_graph_timings", "graph_timings", "forget_graph_timings",
           "PLAUSIBLE", "figure_problem"]

log = logging.getLogger("rlx.select.calibration")
FORMAT_VERSION = 1
# Vector lengths at which op kinds are timed (64 KiB and 4 MiB of f32), and the time the
# per-kind tables may take when a plugin's hook measured the rest.
KIND_PROBE_SIZES = (1 << 14, 1 << 20)
KIND_BUDGET_S = 3.0
SEED_FIELDS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")  # what a plugin's hook must give
MEASURED_FIELDS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns", "dispatch_overhead_ns",
                   "vector_gflops")

# Figures used while a device is uncalibrated: GFLOP/s, GB/s, ns, ns, GFLOP/s, GB/s|None.
# Python-hosted backends pay microseconds per dispatch; GPUs pay a bus transfer.
_GPU_WGPU = (2500.0, 120.0, 80_000.0, 5_000.0, 300.0, 8.0)
NOMINAL: dict[str, tuple[float, float, float, float, float, float | None]] = {
    "cpu": (150.0, 10.0, 5_000.0, 5_000.0, 15.0, None),
    "cuda": (12_000.0, 900.0, 35_000.0, 3_000.0, 2_000.0, 12.0),
    "rocm": (10_000.0, 800.0, 40_000.0, 3_000.0, 1_500.0, 12.0),
    "tpu": (50_000.0, 800.0, 100_000.0, 5_000.0, 5_000.0, 10.0),
    "metal": (5_000.0, 200.0, 30_000.0, 2_000.0, 500.0, None),
    "mlx": (2_000.0, 200.0, 30_000.0, 2_000.0, 300.0, None),
    "ane": (2_000.0, 100.0, 50_000.0, 5_000.0, 200.0, None),
    "gpu": _GPU_WGPU, "vulkan": _GPU_WGPU, "directx": _GPU_WGPU, "opengl": _GPU_WGPU, "webgpu": _GPU_WGPU,
}
_UNKNOWN_DEVICE = (50.0, 10.0, 50_000.0, 10_000.0, 5.0, None)
# A software rasterizer (lavapipe, SwiftShader, WARP) before it is calibrated: a driver
# emulating a GPU on the host's cores, slower than the cpu device at everything (lavapipe
# measured here: 5 GFLOP/s sgemm, 6 GFLOP/s vector, 1.6 GB/s, 260 us per run).
NOMINAL_SOFTWARE = (5.0, 2.0, 250_000.0, 1_000.0, 5.0, 5.0)


@dataclass(frozen=True)
class Calibration:
    """Measured figures of one backend on one device (units in the field names).

    ``roundtrip_overhead_ns`` is paid once per run (host inputs in, outputs out, launch);
    ``dispatch_overhead_ns`` once per executed node: for a backend that compiles the whole
    graph into one program that is the marginal cost of one more node, near zero (the
    per-kind ``kind_dispatch_ns`` pin it down where timed). Rates are peak (best-of) figures.
    """

    backend: str
    device: str
    device_id: str
    fingerprint: str
    sgemm_gflops: float
    memory_bw_gbps: float
    roundtrip_overhead_ns: float
    dispatch_overhead_ns: float
    vector_gflops: float
    transfer_bw_gbps: float | None = None
    kind_dispatch_ns: dict[str, float] = field(default_factory=dict)
    kind_ns_per_element: dict[str, list[float]] = field(default_factory=dict)
    kind_probe_sizes: tuple[int, int] = KIND_PROBE_SIZES
    plugin_version: str | None = None
    host_load: float | None = None  # 1-minute load average per CPU when measured (> 1: busy host)
    threads: dict[str, str] = field(default_factory=dict)  # thread_settings() when measured
    software: bool | None = None  # the plugin said the device is emulated on the host CPU
    sources: dict[str, str] = field(default_factory=dict)  # figure -> "measured" | "read from <plugin cache>"
    measured_s: float = 0.0
    created: float = 0.0
    format: int = FORMAT_VERSION

    def figures(self, fuses_elementwise: bool = False) -> DeviceFigures:
        return DeviceFigures(self.sgemm_gflops, self.memory_bw_gbps, self.roundtrip_overhead_ns,
                             self.dispatch_overhead_ns, self.vector_gflops, self.transfer_bw_gbps,
                             fuses_elementwise, "calibrated", dict(self.kind_dispatch_ns),
                             dict(self.kind_ns_per_element), tuple(self.kind_probe_sizes))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        """Validate a parsed file; raises ValueError saying what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        missing = [n for n in names if n not in data and n not in _OPTIONAL]
        if missing:
            raise ValueError(f"missing field(s) {sorted(missing)}")
        for name in MEASURED_FIELDS:
            _check_positive(name, data[name])
        if data.get("transfer_bw_gbps") is not None:
            _check_positive("transfer_bw_gbps", data["transfer_bw_gbps"])
        for kind, value in _table(data, "kind_dispatch_ns").items():
            _check_positive(f"kind_dispatch_ns[{kind!r}]", value, "ns")
        for kind, values in _table(data, "kind_ns_per_element").items():
            if not isinstance(values, list) or len(values) != 2:
                raise ValueError(f"kind_ns_per_element[{kind!r}] must be [small, large], got {values!r}")
            for v in values:
                _check_positive(f"kind_ns_per_element[{kind!r}]", v, "ns")
        if data.get("software") is not None and not isinstance(data["software"], bool):
            raise ValueError(f"software must be true, false or null, got {data['software']!r}")
        sources = data.get("sources") or {}
        if not (isinstance(sources, dict) and all(isinstance(v, str) for v in sources.values())):
            raise ValueError(f"sources must map figure names to strings, got {sources!r}")
        sizes = data.get("kind_probe_sizes", KIND_PROBE_SIZES)
        if not (isinstance(sizes, (list, tuple)) and len(sizes) == 2 and 0 < sizes[0] < sizes[1]):
            raise ValueError(f"kind_probe_sizes must be two increasing sizes, got {sizes!r}")
        values = {k: v for k, v in data.items() if k in names}
        values["kind_probe_sizes"] = tuple(sizes)
        return cls(**values)


_OPTIONAL = {"transfer_bw_gbps", "kind_dispatch_ns", "kind_ns_per_element", "kind_probe_sizes", "plugin_version",
             "host_load", "threads", "software", "sources", "measured_s", "created", "format"}


def _table(data: dict, name: str) -> dict:
    table = data.get(name) or {}
    if not isinstance(table, dict):
        raise ValueError(f"{name} must be an object, got {type(table).__name__}")
    return table


# Plausible figures by unit (a field's name ends in it): 1 kFLOP/s .. 10 PFLOP/s, 1 kB/s ..
# 1 PB/s, up to 1000 s. Anything else was not measured on a real device.
PLAUSIBLE = {"gflops": (1e-6, 1e7), "gbps": (1e-6, 1e6), "ns": (1e-9, 1e12)}


def figure_problem(name: str, value, unit: str | None = None) -> str | None:
    """Why ``value`` is not a plausible figure for the field ``name`` (in ``unit``, else the
    last ``_`` part of ``name``; see :data:`PLAUSIBLE`), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return f"{name} must be a finite positive number, got {value!r}"
    lo, hi = PLAUSIBLE.get(unit or name.rsplit("_", 1)[-1], (0.0, math.inf))
    if not lo <= value <= hi:
        return f"{name} = {value!r} is outside the plausible range [{lo:g}, {hi:g}]"
    return None


def _check_positive(name: str, value, unit: str | None = None) -> None:
    problem = figure_problem(name, value, unit)
    if problem:
        raise ValueError(problem)


# --- where -------------------------------------------------------------------------------
def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rlx``, or ``~/.cache/rlx``."""
    return cache_root()


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    """The host fingerprint, read once per process (hardware does not change under us)."""
    from ..hw import HwSnapshot
    return HwSnapshot.collect().fingerprint()


def calibration_path(backend: str, device: "Device | str", fingerprint: str | None = None) -> Path:
    dev = parse_device(device)
    device_id = f"{dev.label}{dev.index or ''}-{fingerprint or _fingerprint()}"
    return cache_dir() / f"{_slug(backend)}-calib-{_slug(device_id)}.json"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


# --- reading and writing -----------------------------------------------------------------
_MEMO: dict[Path, Calibration] = {}
_FAILED: dict[tuple[str, str], str] = {}  # (backend, device) -> why calibrating it failed
_MEMO_LOCK = threading.Lock()
_MEASURE_LOCK = threading.RLock()


def load_calibration(device: "Device | str", backend: str | None = None) -> Calibration | None:
    """The valid cached calibration of ``device`` (its serving backend unless named), or None.

    Never measures and never imports a backend library.
    """
    from ..runtime.registry import registry
    dev = parse_device(device)
    try:
        entry = registry().entry(dev)
    except DeviceUnavailableError:  # no plugin serves it: nothing can have been measured
        return None
    name = backend or entry.name
    fingerprint = _fingerprint()
    path = calibration_path(name, dev, fingerprint)
    with _MEMO_LOCK:
        if path in _MEMO:
            return _MEMO[path]
    calib = _read_valid(path, name, dev, fingerprint, _plugin_version(entry.plugin))
    if calib is not None:
        with _MEMO_LOCK:
            _MEMO[path] = calib
    return calib


def _read_valid(path: Path, backend: str, device: Device, fingerprint: str, version: str | None):
    try:
        text = read_trusted(path)
    except FileNotFoundError:
        return None
    except OSError as e:  # UntrustedPathError included
        log.warning("calibration cache %s unreadable (%s); re-measuring", path, e)
        return None
    try:
        calib = Calibration.from_dict(json.loads(text))
    except (ValueError, TypeError) as e:  # json.JSONDecodeError is a ValueError
        log.warning("calibration cache %s is corrupt (%s); re-measuring", path, e)
        return None
    stale = [f"{what} {got!r} != {want!r}" for what, got, want in (
        ("format", calib.format, FORMAT_VERSION), ("backend", calib.backend, backend),
        ("device", calib.device, str(device)), ("fingerprint", calib.fingerprint, fingerprint),
        ("plugin version", calib.plugin_version, version), ("thread settings", calib.threads, thread_settings()))
        if got != want]
    if stale:
        log.info("calibration cache %s is stale (%s); re-measuring", path, "; ".join(stale))
        return None
    return calib


def _write_atomic(path: Path, text: str) -> bool:
    try:
        private_dir(path.parent)
        write_atomic(path, text, fsync=True)
    except OSError as e:  # cannot create, cannot write, or not trusted (UntrustedPathError)
        log.warning("could not write calibration cache %s: %s (figures kept for this process only)", path, e)
        return False
    return True


# Environment variables that size the thread pools kernels run on: figures measured under
# other settings are stale.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")


def thread_settings() -> dict[str, str]:
    """The :data:`THREAD_VARS` that are set, with their values."""
    return {name: os.environ[name] for name in THREAD_VARS if name in os.environ}


def _plugin_version(plugin: str) -> str | None:
    from ..runtime.registry import registry
    return next((p.version for p in registry().plugins if p.name == plugin), None)


# --- measuring ---------------------------------------------------------------------------
_PROGRESS: contextvars.ContextVar[Callable[[float, str], None] | None] = contextvars.ContextVar(
    "rlx_calibration_progress", default=None)


def report_progress(fraction: float, message: str = "") -> None:
    """Tell whoever runs the calibration (``rlx calibrate``'s bar) how far it got, 0..1."""
    callback = _PROGRESS.get()
    if callback is not None:
        callback(min(1.0, max(0.0, fraction)), message)


@contextlib.contextmanager
def progress_reporter(callback: Callable[[float, str], None] | None):
    """Route :func:`report_progress` calls made inside the block to ``callback``."""
    token = _PROGRESS.set(callback)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


# The plugin cache files a calibration read instead of measuring (see note_cache_read).
_READS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("rlx_calibration_reads", default=None)


def note_cache_read(path) -> None:
    """Say that a plugin's calibration hook took its figures from its own cache file
    ``path`` (``tuning.cached_tuning`` does), so that ``rlx calibrate`` can tell which
    figures were read rather than measured."""
    reads = _READS.get()
    if reads is not None:
        reads.append(str(path))


def calibrate(device: "Device | str", *, force: bool = False) -> Calibration:
    """The calibration of ``device``'s backend: the valid cache, or a fresh measurement
    (always fresh with ``force``), written back to the cache."""
    return _calibrate(device, force)


def _calibrate(device: "Device | str", force: bool) -> Calibration:
    """One measurement at a time per process: concurrent callers wait and then find the
    cache, and two devices measured at once would disturb each other's figures."""
    from ..runtime.registry import registry
    dev = parse_device(device)
    reg = registry()
    entry = reg.entry(dev)
    with _MEASURE_LOCK:
        if not force:
            cached = load_calibration(dev, entry.name)
            if cached is not None:
                return cached
        try:
            return _measure_and_store(reg, entry, dev, force)
        except Exception as e:
            with _MEMO_LOCK:
                _FAILED[(entry.name, str(dev))] = f"{type(e).__name__}: {e}"
            raise


def _host_load() -> float | None:
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 2)
    except (AttributeError, OSError):  # no load average on this OS
        return None


def _measure_and_store(reg, entry, dev: Device, force: bool = False) -> Calibration:
    load = _host_load()
    if load is not None and load > 1.0:
        log.warning("calibrating %s on a busy host (load %.1f per CPU): the figures may be pessimistic; "
                    "run `rlx calibrate --force` when it is idle", dev, load)
    backend = reg.backend(dev)  # raises DeviceUnavailableError with the reason
    start = time.perf_counter()
    reads: list[str] = []
    token = _READS.set(reads)
    try:
        figures = reg.calibrate(entry.name, dev, force)
    finally:
        _READS.reset(token)
    read_from = ", ".join(reads)
    given = set(figures) if isinstance(figures, dict) else set()
    if figures is None:
        figures = measure_backend(backend, dev)
    elif isinstance(figures, dict):
        figures = _complete(backend, dev, figures)
    # which figures were measured now, and which the plugin read from a cache of its own
    sources = {k: f"read from {read_from}" if read_from and k in given else "measured"
               for k in (*MEASURED_FIELDS, "transfer_bw_gbps") if figures.get(k) is not None}
    fingerprint = _fingerprint()
    try:
        calib = Calibration.from_dict({
            **{k: figures.get(k) for k in MEASURED_FIELDS}, "transfer_bw_gbps": figures.get("transfer_bw_gbps"),
            "kind_dispatch_ns": figures.get("kind_dispatch_ns") or {},
            "kind_ns_per_element": figures.get("kind_ns_per_element") or {},
            "kind_probe_sizes": figures.get("kind_probe_sizes", KIND_PROBE_SIZES),
            "backend": entry.name, "device": str(dev), "device_id": f"{dev.label}{dev.index or ''}-{fingerprint}",
            "fingerprint": fingerprint, "plugin_version": _plugin_version(entry.plugin), "host_load": load,
            "threads": thread_settings(), "software": figures.get("software"), "sources": sources,
            "measured_s": round(time.perf_counter() - start, 3), "created": time.time()})
    except (ValueError, TypeError, AttributeError) as e:
        raise PluginError(f"calibration of backend '{entry.name}' (plugin '{entry.plugin}') returned bad figures: "
                          f"{e}; expected a dict with positive {', '.join(SEED_FIELDS)} (and optionally "
                          f"dispatch_overhead_ns, vector_gflops, transfer_bw_gbps)") from None
    path = calibration_path(entry.name, dev, fingerprint)
    _write_atomic(path, calib.to_json())
    with _MEMO_LOCK:
        _MEMO[path] = calib
        _FAILED.pop((entry.name, str(dev)), None)
    log.info("calibrated %s on %s in %.2f s: %s", entry.name, dev, calib.measured_s,
             {k: getattr(calib, k) for k in MEASURED_FIELDS})
    return calib


def device_figures(device: "Device | str", *, calibrate: bool = False, software: bool = False) -> DeviceFigures:
    """Figures for the cost model: cached calibration, a fresh one if ``calibrate`` (and the
    device is usable), else nominal (:data:`NOMINAL_SOFTWARE` when ``software``: the caller
    knows the device is a software adapter). Fusion comes from the backend's advisory
    capabilities."""
    from ..runtime.registry import registry
    dev = parse_device(device)
    fuses = _fuses_elementwise(dev)
    calib = load_calibration(dev)
    if calib is None and calibrate and not _failed_before(dev) and registry().is_available(dev):
        try:
            calib = _calibrate(dev, force=False)
        except Exception as e:  # a failing calibration must not stop device selection
            log.warning("calibrating %s failed (%s: %s); using nominal figures for this process", dev,
                        type(e).__name__, e)
    if calib is not None:
        return calib.figures(fuses)
    nominal = NOMINAL_SOFTWARE if software else NOMINAL.get(dev.label, _UNKNOWN_DEVICE)
    sgemm, bw, roundtrip, dispatch, vector, transfer = nominal
    return DeviceFigures(sgemm, bw, roundtrip, dispatch, vector, transfer, fuses, source="nominal")


def _failed_before(dev: Device) -> bool:
    """Whether calibrating ``dev`` already failed in this process (not retried implicitly)."""
    from ..runtime.registry import registry
    try:
        key = (registry().entry(dev).name, str(dev))
    except DeviceUnavailableError:
        return False
    with _MEMO_LOCK:
        return key in _FAILED


def _fuses_elementwise(device: Device) -> bool:
    from ..runtime.registry import registry
    try:
        return "fused_elementwise" in registry().entry(device).get().advisory_capabilities()
    except (DeviceUnavailableError, PluginError):
        return False


def clear_memo() -> None:
    """Forget calibrations read, failures seen and graph timings recorded in this process
    (tests; after deleting cache files)."""
    with _MEMO_LOCK:
        _MEMO.clear()
        _FAILED.clear()
        _TIMINGS.clear()


# --- measured run times of whole graphs ----------------------------------------------------
_TIMINGS: dict[tuple[str, str], dict[str, float]] = {}  # (fingerprint, options key) -> {device: ns}


def _graph_key(graph: Graph, options: CompileOptions | None) -> tuple[str, str]:
    return graph.fingerprint(), (options or CompileOptions()).cache_key()


def record_graph_timings(graph: Graph, timings: dict, options: CompileOptions | None = None) -> None:
    """Remember measured run times (ns; ``inf`` for a device that failed) of ``graph``
    compiled with ``options``, by device, for this process."""
    key = _graph_key(graph, options)
    with _MEMO_LOCK:
        _TIMINGS.setdefault(key, {}).update({str(parse_device(d)): float(ns) for d, ns in timings.items()})


def graph_timings(graph: Graph, options: CompileOptions | None = None) -> dict[Device, float]:
    """The run times recorded for ``graph`` (see :func:`record_graph_timings`), by device."""
    key = _graph_key(graph, options)
    with _MEMO_LOCK:
        return {parse_device(d): ns for d, ns in _TIMINGS.get(key, {}).items()}


def forget_graph_timings(graph: Graph, options: CompileOptions | None = None) -> None:
    """Drop the run times recorded for ``graph`` (conditions changed: re-measure)."""
    key = _graph_key(graph, options)
    with _MEMO_LOCK:
        _TIMINGS.pop(key, None)


# --- the generic measurement ---------------------------------------------------------------
def _timed_runs(compiled, feeds: dict, runs: int) -> list[float]:
    compiled.run(feeds)  # warm-up: first-run allocation and lazy kernel builds
    out = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        compiled.run(feeds)
        out.append(time.perf_counter_ns() - t0)
    return out


def _compile(backend: Backend, graph: Graph, device: Device | None):
    from ..runtime.session import compile_graph
    return compile_graph(backend, graph, CompileOptions(), device)


def _chain(kind: str, n: int, length: int, inputs: int = 1) -> Graph:
    """``length`` nodes of ``kind`` in a row over f32 vectors of ``n`` elements."""
    g = Graph(f"calib-{kind}-{length}x{n}")
    xs = [g.input(f"x{i}", Shape((n,), "f32")) for i in range(inputs)]
    y = xs[0]
    for _ in range(length):
        y = g.op(kind, y, *xs[1:])
    g.set_outputs([y])
    return g


def _feeds(graph: Graph, rng: np.random.Generator) -> dict:
    return {n.attrs["name"]: rng.random(n.attrs["dims"], dtype=np.float32) for n in graph.input_nodes}


def measure_overheads(backend: Backend, device: Device | None = None, runs: int = 150, chain: int = 33) -> dict:
    """``roundtrip_overhead_ns`` and ``dispatch_overhead_ns``: from timing a 1-node and a
    ``chain``-node graph of tiny ``neg`` s through ``backend`` (medians)."""
    rng = np.random.default_rng(0)
    medians = []
    for length in (1, chain):
        g = _chain("neg", 1, length)
        medians.append(float(np.median(_timed_runs(_compile(backend, g, device), _feeds(g, rng), runs))))
    dispatch = max((medians[1] - medians[0]) / (chain - 1), 1.0)
    return {"roundtrip_overhead_ns": max(medians[0] - dispatch, 1.0), "dispatch_overhead_ns": dispatch}


def _complete(backend: Backend, device: Device, figures: dict) -> dict:
    """A plugin's figures with what its hook left out measured generically through the
    backend. Hooks must give the seed's three fields; ``dispatch_overhead_ns``,
    ``vector_gflops`` and the per-kind tables are optional. The per-kind tables also pin
    down the marginal cost of one more node, whatever the plugin's own dispatch figure
    means (for a whole-graph compiler it is mostly a program launch)."""
    out = dict(figures)
    roundtrip = out.get("roundtrip_overhead_ns")
    if not isinstance(roundtrip, (int, float)) or isinstance(roundtrip, bool) or roundtrip <= 0:
        return out  # invalid anyway: Calibration.from_dict says why
    if "dispatch_overhead_ns" not in out or "vector_gflops" not in out:
        overheads = {**measure_overheads(backend, device), "roundtrip_overhead_ns": roundtrip}
        out.setdefault("dispatch_overhead_ns", overheads["dispatch_overhead_ns"])
        out.setdefault("vector_gflops", measure_vector(backend, device, overheads))
    if "kind_dispatch_ns" not in out:
        out["kind_dispatch_ns"], out["kind_ns_per_element"] = measure_kind_costs(
            backend, device, roundtrip, time.perf_counter() + KIND_BUDGET_S)
        out["kind_probe_sizes"] = list(KIND_PROBE_SIZES)
    return out


def measure_backend(backend: Backend, device: Device | None = None, *, sgemm_gflops: float | None = None,
                    budget_s: float = 2.5) -> dict:
    """Every figure of :class:`Calibration` by timing graphs through ``backend``.

    * overheads: :func:`measure_overheads`;
    * ``memory_bw_gbps``: one ``add`` of two 16 MiB f32 vectors (bytes read + written over
      the time left after overheads; from host arrays, so a discrete device's bus shows);
    * ``vector_gflops``: :func:`measure_vector`;
    * ``sgemm_gflops``: a 512^3 f32 ``matmul`` (1024^3 if that was quick), unless the caller
      measured it; a backend without matmul gets its vector rate (it never runs a GEMM);
    * ``kind_dispatch_ns``, ``kind_ns_per_element``: :func:`measure_kind_costs` with what is
      left of ``budget_s`` (the whole measurement stays near ``budget_s``: a loaded machine
      gets fewer kinds timed, never fewer than :data:`MIN_KINDS_TIMED`).
    """
    deadline = time.perf_counter() + budget_s
    rng = np.random.default_rng(0)
    report_progress(0.05, "overheads")
    out = measure_overheads(backend, device)
    fixed = out["roundtrip_overhead_ns"] + out["dispatch_overhead_ns"]

    report_progress(0.15, "memory bandwidth")
    n = 1 << 22
    g = _chain("add", n, 1, inputs=2)
    best = min(_timed_runs(_compile(backend, g, device), _feeds(g, rng), 5))
    out["memory_bw_gbps"] = 3 * 4 * n / max(best - fixed, 1.0)

    report_progress(0.25, "vector throughput")
    out["vector_gflops"] = measure_vector(backend, device, out)

    report_progress(0.35, "GEMM throughput")
    if sgemm_gflops is None:
        sgemm_gflops = _measure_sgemm(backend, device, fixed, deadline) or out["vector_gflops"]
    out["sgemm_gflops"] = sgemm_gflops
    out["transfer_bw_gbps"] = None
    out["kind_dispatch_ns"], out["kind_ns_per_element"] = measure_kind_costs(
        backend, device, out["roundtrip_overhead_ns"], deadline, progress=(0.45, 1.0))
    out["kind_probe_sizes"] = list(KIND_PROBE_SIZES)
    report_progress(1.0, "done")
    return out


def measure_vector(backend: Backend, device: Device | None, overheads: dict) -> float:
    """``vector_gflops``: a chain of 8 ``tanh`` (bounded, unlike ``exp``) on 1 MiB vectors,
    8 FLOPs per element, ``overheads`` (roundtrip and dispatch) taken off."""
    n, length = 1 << 18, 8
    g = _chain("tanh", n, length)
    best = min(_timed_runs(_compile(backend, g, device), _feeds(g, np.random.default_rng(0)), 5))
    per_node = (best - overheads["roundtrip_overhead_ns"]) / length - overheads["dispatch_overhead_ns"]
    return 8.0 * n / max(per_node, 1.0)


def _measure_sgemm(backend: Backend, device: Device | None, fixed: float, deadline: float) -> float | None:
    ops = backend.supported_ops()
    if "matmul" not in ops or (ops["matmul"] is not None and DType.F32 not in ops["matmul"]):
        return None
    rng = np.random.default_rng(0)
    best_rate = None
    for n in (512, 1024):
        g = Graph(f"calib-matmul-{n}")
        a, b = g.input("a", Shape((n, n), "f32")), g.input("b", Shape((n, n), "f32"))
        g.set_outputs([g.matmul(a, b)])
        t0 = time.perf_counter()
        best = min(_timed_runs(_compile(backend, g, device), _feeds(g, rng), 3))
        rate = 2.0 * n ** 3 / max(best - fixed, 1.0)
        best_rate = max(best_rate or 0.0, rate)
        if (time.perf_counter() - t0) * 10 > deadline - time.perf_counter():
            break  # the next size (8x the work) would not fit the time budget
    return best_rate


# Timed first, so that a calibration cut short by its budget still covers the usual models.
# The first MIN_KINDS_TIMED of them are timed whatever the budget says (a loaded host
# still gets figures for the commonest kinds; the result's structure never depends on load).
MIN_KINDS_TIMED = 2
COMMON_KINDS = ("matmul", "add", "mul", "sub", "div", "exp", "tanh", "gelu", "relu", "sigmoid", "silu", "softmax",
                "layer_norm", "rms_norm", "attention", "transpose", "reduce_sum", "reduce_mean", "conv")
# Tiny operands for kinds that do not take plain vectors.
_TINY_SHAPES = {"matmul": [(1, 1), (1, 1)], "dense_solve": [(1, 1), (1, 1)], "attention": [(1, 1, 1, 1)] * 3,
                "conv": [(1, 1, 1), (1, 1, 1)], "conv_transpose2d": [(1, 1, 1, 1), (1, 1, 1, 1)]}


def probe_order(kinds) -> list[str]:
    """The order op kinds are timed in: :data:`COMMON_KINDS` first, then alphabetical."""
    supported = set(kinds) - VIEW_KINDS
    return [k for k in COMMON_KINDS if k in supported] + sorted(supported - set(COMMON_KINDS))


def measure_kind_costs(backend: Backend, device: Device | None, roundtrip_ns: float, deadline: float,
                       sizes: tuple[int, int] = KIND_PROBE_SIZES, progress: tuple[float, float] = (0.0, 1.0),
                       *, min_kinds: int = MIN_KINDS_TIMED, clock: Callable[[], float] = time.perf_counter
                       ) -> tuple[dict[str, float], dict[str, list[float]]]:
    """``(dispatch, per_element)`` for the op kinds ``backend`` runs, by timing one-node graphs.

    * ``dispatch[kind]``: a node of ``kind`` on tiny inputs, minus the roundtrip: kernels
      that prepare or check a lot cost more per call than a plain numpy ufunc.
    * ``per_element[kind]``: for kinds that work on one or two f32 vectors (elementwise,
      reductions, norms, ...), ns per element at the two ``sizes`` (in cache and out of
      most caches: kernels that make temporaries slow down more than linearly), see
      :func:`_per_element`. GEMM kinds are left to ``sgemm_gflops``.

    Kinds still left when ``deadline`` passes are skipped (:data:`COMMON_KINDS` go first):
    their nodes use the generic dispatch figure and the FLOP rates. The first
    ``min_kinds`` kinds are timed even past the deadline. ``clock`` (seconds, like
    ``time.perf_counter``) is what ``deadline`` is compared with.
    """
    kinds = probe_order(backend.supported_ops())
    rng = np.random.default_rng(0)
    dispatch: dict[str, float] = {}
    per_element: dict[str, list[float]] = {}
    for i, kind in enumerate(kinds):
        if i >= min_kinds and clock() > deadline:
            log.info("calibration budget spent; %d op kind(s) left untimed", len(kinds) - i)
            break
        report_progress(progress[0] + (progress[1] - progress[0]) * i / len(kinds), f"op {kind}")
        tiny = _best_time(backend, device, _single_node(kind, _TINY_SHAPES.get(kind)), rng)
        if tiny is None:
            continue
        dispatch[kind] = max(tiny - roundtrip_ns, 1.0)
        if kind in GEMM_KINDS:
            continue
        times = []
        for n in sizes:
            t = _per_element(backend, device, kind, n, tiny, rng)
            if t is None:
                break
            times.append(t)
        if len(times) == len(sizes):
            per_element[kind] = times
    return dispatch, per_element


def _per_element(backend, device, kind: str, n: int, tiny: float, rng) -> float | None:
    """ns per element of one ``kind`` node on vectors of ``n``. Shape-preserving kinds: the
    time a second node adds to a one-node graph, i.e. without the graph's input and output
    transfers and, on a fusing backend, as fused (the marginal cost the cost model adds
    per node). Others (reductions, ...): the one-node time less the tiny run's."""
    single = _best_time(backend, device, _single_node(kind, None, n), rng)
    if single is None:
        return None
    double = _best_time(backend, device, _single_node(kind, None, n, length=2), rng)
    base = single if double is not None else tiny
    return max((double if double is not None else single) - base, 1.0) / n


def _single_node(kind: str, shapes: list | None, n: int = 1, length: int = 1) -> Graph | None:
    """One ``kind`` node with default attributes on f32 inputs of ``shapes`` (default: one or
    two vectors of ``n``), or None if the kind cannot be built that way. ``length=2`` chains
    a second node onto the first's output (None unless the kind keeps the input's shape)."""
    schema = get_schema(kind)
    if schema.dtypes is not None and DType.F32 not in schema.dtypes:
        return None
    if shapes is None:
        if schema.min_inputs not in (1, 2):
            return None
        shapes = [(n,)] * schema.min_inputs
    g = Graph(f"calib-{kind}-{length}x{n}")
    try:
        xs = [g.input(f"x{i}", Shape(dims, "f32")) for i, dims in enumerate(shapes)]
        outs = g.op(kind, *xs)
        for _ in range(length - 1):
            if isinstance(outs, tuple) or outs.shape != xs[0].shape:
                return None
            outs = g.op(kind, outs, *xs[1:])
    except RlxError:
        return None
    g.set_outputs(list(outs) if isinstance(outs, tuple) else [outs])
    return g


def _best_time(backend, device, graph: Graph | None, rng) -> float | None:
    """Best run time of ``graph`` in ns (inputs in [0.5, 1.5): inside every op's domain)."""
    if graph is None:
        return None
    feeds = {k: (v + 0.5).astype(np.float32) for k, v in _feeds(graph, rng).items()}
    try:
        compiled = _compile(backend, graph, device)
        t0 = time.perf_counter_ns()
        compiled.run(feeds)
        first = time.perf_counter_ns() - t0
    except RlxError as e:
        log.debug("no cost probe for graph %s: %s", graph.name, e)
        return None
    if first > 20e6:  # slow: one more run (the first may include lazy set-up), keep the better
        t0 = time.perf_counter_ns()
        compiled.run(feeds)
        return float(min(first, time.perf_counter_ns() - t0))
    # Fast: the first run was the warm-up; best of 5 (single samples catch other processes' bursts).
    return float(min(_timed_runs(compiled, feeds, 5)))

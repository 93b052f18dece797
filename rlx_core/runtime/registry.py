"""Backend registry: discovers plugins through entry points, isolates their failures.

Loading is lazy (first call to :func:`registry`) and cheap: plugin modules return
:class:`BackendFactory` records; a backend object is created only when used. Every
plugin that fails -- at import, in a hook, in ``create()`` or in its probe -- is
recorded with its error and shown by ``device_report`` / ``rlx devices``; nothing
escapes into ``import rlx_core`` or into unrelated devices.

Loading happens on the first :func:`registry` call, or earlier when a device label
nobody knows yet is parsed (a plugin may declare its device at import; see
``rlx_core.runtime.device``).

Checks at load: each entry-point module declares ``RLX_PLUGIN_API`` (see
``rlx_core.runtime.hookspecs``); a version this core does not speak marks the plugin
failed with a message saying what to upgrade, a missing one is accepted as API 1 with a
note. When the registry creates a backend it checks ``supported_ops()``
(:func:`~rlx_core.runtime.backend.check_supported_ops`); a malformed table marks the
backend failed with the reason. Both show in ``rlx devices``.

Controls (environment):

* ``RLX_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (``register_backends`` only).
* ``RLX_PLUGINS=cpu,rlx-wgpu,nvidia``: load only these plugins. Each item is an
  entry-point name (``cpu``), a distribution name (``rlx-cpu``; case and ``-``/``_``/``.``
  do not matter) or a device label or alias (``cuda``, ``nvidia``, ``gpu``, ``vulkan``),
  which selects the plugin named after the device (entry point ``cuda`` or distribution
  ``rlx-cuda``) or the one published for it (``rlx-wgpu`` for ``gpu``, ``vulkan``,
  ``opengl``, ``directx``, ``webgpu``). A third-party plugin serving a built-in device
  under another name is selected by its own name. Items that match no installed plugin
  are logged as warnings and listed by ``rlx devices``.
* ``RLX_BACKEND_<LABEL>=<name>``: when several plugins serve one device, use this one
  (otherwise the highest priority, then the alphabetically first name, wins). ``name``
  is a backend name, or its plugin's entry-point or distribution name. A value that
  names nothing (or a ``<LABEL>`` that is no device label) is warned about at load and
  listed by ``rlx devices``; using that device then raises ``PolicyError``.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable

import pluggy

from ..errors import DeviceUnavailableError, PluginError, PolicyError
from .backend import Availability, Backend, BackendFactory, check_supported_ops
from .device import DEVICE_PRIORITY, Device, known_devices, lookup_label, parse_device
from .hookspecs import PLUGIN_API_VERSION, SUPPORTED_PLUGIN_APIS, RlxHookSpecs

__all__ = ["ENTRY_POINT_GROUP", "PLUGIN_API_VERSION", "PluginRecord", "BackendEntry", "Registry", "registry",
           "register_backends", "reset_registry", "ensure_loaded", "install_hint"]

log = logging.getLogger("rlx.registry")
ENTRY_POINT_GROUP = "rlx.backends"


@dataclass
class PluginRecord:
    """One plugin source: an entry point or a by-hand registration, and how it went."""

    name: str
    origin: str  # "entry point <dist> <version>" or "register_backends"
    status: str = "loaded"  # loaded | failed | disabled
    error: str = ""
    distribution: str | None = None
    version: str | None = None
    api: int | None = None  # the RLX_PLUGIN_API it declares (None: declares none)
    note: str = ""  # something worth knowing that is not a failure

    @property
    def label(self) -> str:
        """``rlx-cuda 0.1.0`` for an installed plugin, else its name."""
        return f"{self.distribution} {self.version}" if self.distribution else self.name


@dataclass
class BackendEntry:
    """A backend factory plus its plugin, lazily created backend and any failure."""

    factory: BackendFactory
    plugin: str
    backend: Backend | None = None
    error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def name(self) -> str:
        return self.factory.name

    @property
    def device(self) -> Device:
        return self.factory.device

    def get(self) -> Backend:
        with self._lock:
            if self.backend is None and not self.error:
                try:
                    backend = self.factory.create()
                    if not isinstance(backend, Backend):
                        raise PluginError(f"create() returned {type(backend).__name__}, not a Backend")
                    check_supported_ops(backend)
                    self.backend = backend
                except Exception as e:  # a broken plugin must not break the core
                    self.error = f"{type(e).__name__}: {e}"
                    log.warning("backend '%s' from plugin '%s' failed to start: %s", self.name, self.plugin,
                                self.error)
                    log.debug("%s", traceback.format_exc())
            if self.backend is None:
                raise PluginError(f"backend '{self.name}' (plugin '{self.plugin}') failed to start: {self.error}")
            return self.backend

    def availability(self, full: bool = True) -> Availability:
        """``full=False`` uses only the factory's cheap probe (no heavy imports)."""
        if self.error:
            return Availability(False, f"plugin error: {self.error}")
        cheap = self._safe(self.factory.cheap_probe)
        if not cheap.ok or not full:
            return cheap
        try:
            backend = self.get()
        except PluginError as e:
            return Availability(False, str(e))
        return self._safe(backend.is_available)

    def _safe(self, probe) -> Availability:
        try:
            result = probe()
            return result if isinstance(result, Availability) else Availability(bool(result))
        except Exception as e:
            return Availability(False, f"probe raised {type(e).__name__}: {e}")


class Registry:
    """All backends known to this process, by device label."""

    def __init__(self, autoload: bool = True):
        self.pm = pluggy.PluginManager("rlx")
        self.pm.add_hookspecs(RlxHookSpecs)
        self.plugins: list[PluginRecord] = []
        self.entries: dict[str, list[BackendEntry]] = {}
        self.warnings: list[str] = []  # load-time problems with the RLX_* plugin variables
        self._lock = threading.RLock()
        if autoload:
            self.load_entry_points()

    # --- loading --------------------------------------------------------------------
    def load_entry_points(self) -> None:
        if _autoload_disabled():
            log.info("RLX_DISABLE_PLUGIN_AUTOLOAD is set: no plugins loaded from entry points")
            return
        depth = getattr(_LOADING, "depth", 0)
        _LOADING.depth = depth + 1
        try:
            self._load_entry_points()
        finally:
            _LOADING.depth = depth
        for warning in self.backend_override_warnings():
            log.warning("%s", warning)

    def _load_entry_points(self) -> None:
        from importlib import metadata  # ~10 ms: paid when plugins load, not at import
        eps = sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        records = []
        for ep in eps:
            dist = getattr(ep, "dist", None)
            records.append(PluginRecord(ep.name, f"entry point {ep.value}",
                                        distribution=dist.metadata["Name"] if dist else None,
                                        version=dist.version if dist else None))
        only = _env_items("RLX_PLUGINS")
        selected = None
        if only is not None:
            selected = set()
            for item in only:
                hits = [i for i, rec in enumerate(records) if _plugin_matches(rec, item)]
                if not hits:
                    known = ", ".join(f"{r.name} ({r.distribution})" if r.distribution else r.name
                                      for r in records) or "none"
                    self._warn(f"RLX_PLUGINS: {item!r} matches no installed plugin (items are entry-point names, "
                               f"distribution names or device names; installed: {known})")
                selected.update(hits)
        for i, (ep, rec) in enumerate(zip(eps, records)):
            if selected is not None and i not in selected:
                rec.status, rec.error = "disabled", "not listed in RLX_PLUGINS"
                self.plugins.append(rec)
                continue
            try:
                obj = ep.load()
            except Exception as e:
                self._failed(rec, e)
                continue
            self._register(obj, rec)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        log.warning("%s", message)

    def env_warnings(self) -> list[str]:
        """Values of ``RLX_PLUGINS`` / ``RLX_BACKEND_<LABEL>`` that match nothing (as of now)."""
        return list(self.warnings) + self.backend_override_warnings()

    def backend_override_warnings(self) -> list[str]:
        out = []
        for var, value in sorted(os.environ.items()):
            if not var.startswith(_OVERRIDE_PREFIX) or not value.strip():
                continue
            value, suffix = value.strip(), var[len(_OVERRIDE_PREFIX):]
            label = lookup_label(suffix)
            if label is None:
                out.append(f"{var}={value!r}: '{suffix.lower()}' is not a device label, so the variable has no "
                           f"effect (labels: {', '.join(known_devices())})")
            elif label != suffix.lower():
                out.append(f"{var}={value!r} has no effect: the variable takes the device's label; "
                           f"set {_OVERRIDE_PREFIX}{label.upper()}={value}")
            elif not self.entries.get(label):
                out.append(f"{var}={value!r} has no effect: no installed plugin serves '{label}'")
            elif self._forced(label, value) is None:
                out.append(f"{var}={value!r} names no backend for '{label}' (backends serving it: "
                           f"{_backend_list(self.entries[label], self)}); using '{label}' raises PolicyError")
        return out

    def unloaded_plugin_for(self, device: "Device | str") -> PluginRecord | None:
        """An installed plugin that would serve ``device`` (named after it, or published for
        it) but failed to load or was disabled; None if there is none."""
        text = str(device).strip().lower()
        label = lookup_label(text.partition(":")[0]) or text
        names = _names_for_device(label)
        return next((r for r in self.plugins
                     if r.status != "loaded" and names & {_norm(r.name), _norm(r.distribution or "")}), None)

    def record(self, plugin: str) -> PluginRecord | None:
        """The record of the plugin called ``plugin`` (entry-point or registration name)."""
        return next((r for r in self.plugins if r.name == plugin), None)

    def register(self, plugin: Any, name: str | None = None) -> PluginRecord:
        """Register a hook-implementing module/object that is not installed as a plugin."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        return self._register(plugin, PluginRecord(name, "register_backends"))

    def _register(self, obj: Any, rec: PluginRecord) -> PluginRecord:
        with self._lock:
            try:
                _check_api(obj, rec)
                if self.pm.is_registered(obj):
                    raise PluginError(f"plugin object {obj!r} is already registered")
                self.pm.register(obj, name=f"{rec.name}#{len(self.plugins)}")
                self.plugins.append(rec)
                self._collect(obj, rec)
            except Exception as e:
                if self.pm.is_registered(obj):
                    self.pm.unregister(obj)
                self._failed(rec, e)
            return rec

    def _failed(self, rec: PluginRecord, e: BaseException) -> None:
        rec.status, rec.error = "failed", str(e) if isinstance(e, _ApiMismatch) else f"{type(e).__name__}: {e}"
        if rec not in self.plugins:
            self.plugins.append(rec)
        log.warning("rlx plugin '%s' failed to load: %s", rec.name, rec.error)

    def _collect(self, obj: Any, rec: PluginRecord) -> None:
        from ..custom import CustomOp, register_custom_op
        impl = getattr(obj, "rlx_custom_ops", None)
        for op_decl in (impl() if impl else None) or []:
            if not isinstance(op_decl, CustomOp):
                raise PluginError(f"rlx_custom_ops returned {type(op_decl).__name__}, not CustomOp")
            register_custom_op(op_decl)
        impl = getattr(obj, "rlx_backends", None)
        for factory in (impl() if impl else None) or []:
            if not isinstance(factory, BackendFactory):
                raise PluginError(f"rlx_backends returned {type(factory).__name__}, not BackendFactory")
            entries = self.entries.setdefault(factory.device.label, [])
            entries.append(BackendEntry(factory, rec.name))
            entries.sort(key=lambda e: (-e.factory.priority, e.name))

    # --- queries --------------------------------------------------------------------
    def devices(self) -> list[Device]:
        """Every device some plugin serves, in fallback priority order."""
        labels = sorted(self.entries, key=_priority_key)
        return [Device(lbl) for lbl in labels]

    def entry(self, device: "Device | str") -> BackendEntry:
        device = parse_device(device)
        entries = self.entries.get(device.label)
        if not entries:
            raise DeviceUnavailableError(
                f"no installed plugin serves device '{device.label}': {install_hint(device.label, self)}. "
                f"See `rlx devices`; served here: {', '.join(str(d) for d in self.devices()) or 'nothing'}")
        var = f"{_OVERRIDE_PREFIX}{device.label.upper()}"
        forced = os.environ.get(var, "").strip()
        if not forced:
            return entries[0]  # highest priority, then name (kept sorted)
        chosen = self._forced(device.label, forced)
        if chosen is None:
            raise PolicyError(f"{var}={forced!r} names no backend for '{device.label}'; "
                              f"backends serving it: {_backend_list(entries, self)}")
        return chosen

    def _forced(self, label: str, value: str) -> BackendEntry | None:
        """The entry ``RLX_BACKEND_<LABEL>=value`` names: a backend name, else the plugin's
        entry-point or distribution name."""
        entries = self.entries.get(label, [])
        for e in entries:
            if e.name == value:
                return e
        want = _norm(value)
        for e in entries:
            rec = self.record(e.plugin)
            if want == _norm(e.plugin) or (rec is not None and rec.distribution and want == _norm(rec.distribution)):
                return e
        return None

    def backend(self, device: "Device | str") -> Backend:
        """The backend for ``device``; raises DeviceUnavailableError with the reason."""
        entry = self.entry(device)
        avail = entry.availability()
        if not avail.ok:
            raise DeviceUnavailableError(f"device '{entry.device.label}' (backend '{entry.name}') "
                                         f"is not available: {avail.reason}")
        return entry.get()

    def is_available(self, device: "Device | str") -> bool:
        try:
            return self.entry(device).availability().ok
        except DeviceUnavailableError:
            return False

    def op_kernels(self, backend: str) -> dict[str, Any]:
        """Extra kernels plugins provide for ``backend`` (custom ops, overrides)."""
        out: dict[str, Any] = {}
        for table in self.pm.hook.rlx_op_kernels(backend=backend):
            out.update(table or {})
        return out

    def calibrate(self, backend: str, device: Device, force: bool = False) -> dict | None:
        return self.pm.hook.rlx_calibrate(backend=backend, device=device, force=force)


_OVERRIDE_PREFIX = "RLX_BACKEND_"

# --- install hints: the one place that says how to get a device served -----------------------
# Device label -> the distribution published from this repository that serves it. Devices not
# listed (rocm, metal, mlx, ane) have no published plugin yet: add them when theirs lands.
_PUBLISHED = {"cpu": "rlx-cpu", "cuda": "rlx-cuda", "tpu": "rlx-tpu", "gpu": "rlx-wgpu", "vulkan": "rlx-wgpu",
              "opengl": "rlx-wgpu", "directx": "rlx-wgpu", "webgpu": "rlx-wgpu", "rocm": "rlx-rocm", "mlx": "rlx-mlx",
              "metal": "rlx-metal", "ane": "rlx-metal"}
# Distribution -> the exact command that installs it (extras of rlx-core, or of the plugin).
_INSTALL = {"rlx-cpu": 'pip install "rlx-core[cpu]"',
            "rlx-cuda": 'pip install "rlx-cuda[cuda12]" (or "rlx-cuda[cuda13]" for a CUDA 13 driver)',
            "rlx-tpu": 'pip install "rlx-core[tpu]"',
            "rlx-wgpu": 'pip install "rlx-core[wgpu]"',
            "rlx-rocm": 'pip install "rlx-core[rocm]"',
            "rlx-mlx": 'pip install "rlx-core[mlx]"',
            "rlx-metal": 'pip install "rlx-core[metal]"'}
# Optional features of rlx-core itself -> the command that installs them.
_FEATURES = {"onnx": 'pip install "rlx-core[onnx]"',  # onnx, and onnxruntime for `rlx run --check`
             "plot": 'pip install "rlx-core[plot]"',
             "weights": 'pip install "rlx-core[weights]"',  # safetensors and gguf weight files
             "telemetry": 'pip install "rlx-core[telemetry]"',  # `rlx gpu`: NVML and a live table
             "serve": 'pip install "rlx-core[serve]"'}  # rlx-serve: `rlx serve`, Ray Serve deployments


def install_hint(device: "Device | str | None" = None, reg: "Registry | None" = None) -> str:
    """What to do so that a plugin serves ``device`` (default ``cpu``): the error of an
    installed plugin for it that failed to load (or why it was not loaded), else the exact
    ``pip install`` command of the plugin published for it, else that none is published.
    ``install_hint("onnx")`` / ``install_hint("plot")``: the command for those features.
    Every "install ..." message in rlx-core comes from here."""
    text = str(device or "cpu").strip().lower()
    if text in _FEATURES:
        return _FEATURES[text]
    label = lookup_label(text.partition(":")[0]) or text
    reg = reg if reg is not None else _REGISTRY
    rec = reg.unloaded_plugin_for(label) if reg is not None else None
    if rec is not None and rec.status == "failed":
        return f"plugin '{rec.name}' ({rec.label}) is installed but failed to load: {rec.error}"
    if rec is not None:
        return f"plugin '{rec.name}' ({rec.label}) is installed but was not loaded ({rec.error}): add " \
               f"'{rec.name}' to RLX_PLUGINS"
    if _autoload_disabled():
        how = "RLX_DISABLE_PLUGIN_AUTOLOAD is set, so no installed plugin is loaded: unset it, or register a " \
              "backend with register_backends"
        return how if label in _PUBLISHED else f"{how} (no plugin for '{label}' is published yet)"
    dist = _PUBLISHED.get(label)
    if dist is not None:
        return _INSTALL[dist]
    return f"no RLX plugin for '{label}' is published yet; install a third-party plugin serving it, or write " \
           f"one (docs/writing-a-backend.md) and register it"


def unloaded_plugins_note() -> str:
    """``"; plugins not loaded: ..."`` naming installed plugins that failed or were disabled
    (for "unknown device" errors: the device may be theirs). Empty when there are none."""
    reg = _REGISTRY
    plugins = reg.plugins if reg is not None else []
    failed = [f"{r.name} ({r.label}) failed: {r.error}" for r in plugins if r.status == "failed"]
    disabled = [r.name for r in plugins if r.status == "disabled"]
    if disabled:
        failed.append(f"not listed in RLX_PLUGINS: {', '.join(disabled)}")
    return "; plugins not loaded: " + "; ".join(failed) if failed else ""


def _names_for_device(label: str) -> set[str]:
    """Plugin names (normalized) that stand for ``label``: named after it, or published for it."""
    names = {_norm(label), _norm(f"rlx-{label}")}
    dist = _PUBLISHED.get(label)
    if dist:
        names |= {_norm(dist), _norm(dist.removeprefix("rlx-"))}
    return names


def _plugin_matches(rec: PluginRecord, item: str) -> bool:
    """Does an ``RLX_PLUGINS`` item select this plugin? (module docstring)"""
    own = {_norm(rec.name)} | ({_norm(rec.distribution)} if rec.distribution else set())
    if _norm(item) in own:
        return True
    label = lookup_label(item)
    return label is not None and bool(own & _names_for_device(label))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip().lower())


def _backend_list(entries: list[BackendEntry], reg: Registry) -> str:
    def one(e: BackendEntry) -> str:
        rec = reg.record(e.plugin)
        return f"{e.name} (plugin {e.plugin}" + (f", {rec.distribution})" if rec and rec.distribution else ")")
    return ", ".join(one(e) for e in entries)


# --- plugin API version ---------------------------------------------------------------------
class _ApiMismatch(PluginError):
    """A plugin written for a plugin API this core does not speak."""


def _check_api(obj: Any, rec: PluginRecord) -> None:
    """Read ``RLX_PLUGIN_API`` from a plugin object; raise _ApiMismatch if unsupported."""
    api = getattr(obj, "RLX_PLUGIN_API", None)
    if api is None:
        if rec.distribution is not None or rec.origin.startswith("entry point"):
            rec.note = f"declares no RLX_PLUGIN_API; loaded as plugin API {PLUGIN_API_VERSION}"
            log.info("rlx plugin '%s' %s", rec.name, rec.note)
        return
    if not isinstance(api, int) or isinstance(api, bool):
        raise _ApiMismatch(f"plugin {rec.label}: RLX_PLUGIN_API must be an int (the RLX plugin API version it "
                           f"was written for, {PLUGIN_API_VERSION} for this rlx-core), got "
                           f"{type(api).__name__} {api!r}")
    rec.api = api
    if api in SUPPORTED_PLUGIN_APIS:
        return
    core = _core_version()
    speaks = ", ".join(map(str, sorted(SUPPORTED_PLUGIN_APIS)))
    who = rec.distribution or rec.name
    if api > max(SUPPORTED_PLUGIN_APIS):
        fix = f"upgrade rlx-core (pip install -U rlx-core), or install a {who} release written for API {speaks}"
    else:
        fix = f"upgrade {who} (pip install -U {who}) to a release written for API {speaks}, or use an older rlx-core"
    raise _ApiMismatch(f"plugin {rec.label} was written for RLX plugin API {api}; this rlx-core {core} speaks "
                       f"{speaks}: {fix}")


def _core_version() -> str:
    try:
        from .. import __version__
        return __version__
    except ImportError:  # pragma: no cover - a broken install
        return "?"


def _autoload_disabled() -> bool:
    return os.environ.get("RLX_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0")


def _priority_key(label: str):
    return (DEVICE_PRIORITY.index(label) if label in DEVICE_PRIORITY else len(DEVICE_PRIORITY), label)


def _env_items(var: str) -> list[str] | None:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return None
    return list(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))


_REGISTRY: Registry | None = None
_REG_LOCK = threading.Lock()
_LOADING = threading.local()  # .depth > 0 while this thread loads entry points


def registry() -> Registry:
    """The process-wide registry, loading entry points on first use."""
    global _REGISTRY
    if getattr(_LOADING, "depth", 0):
        raise PluginError("registry() was called while the plugins are being loaded (from a plugin module's "
                          "import or a hook): a plugin must not use the registry until its hooks have returned")
    with _REG_LOCK:
        if _REGISTRY is None:
            _REGISTRY = Registry()
        return _REGISTRY


def ensure_loaded() -> bool:
    """Make sure the entry points are loaded (creating the registry if needed). False,
    doing nothing, when called while this thread is loading them (from a plugin's import)."""
    if getattr(_LOADING, "depth", 0):
        return False
    registry()
    return True


def register_backends(*plugins: Any) -> list[PluginRecord]:
    """Register plugin modules/objects by hand (the seed's ``register_backends!``)."""
    reg = registry()
    return [reg.register(p) for p in plugins]


def reset_registry() -> None:
    """Forget every plugin; the next :func:`registry` call loads entry points again."""
    global _REGISTRY
    with _REG_LOCK:
        _REGISTRY = None


def iter_entries(reg: Registry | None = None) -> Iterable[BackendEntry]:
    reg = reg or registry()
    for label in sorted(reg.entries, key=_priority_key):
        yield from reg.entries[label]

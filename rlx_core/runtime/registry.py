"""Backend registry: discovers plugins through entry points, isolates their failures.

Loading is lazy (first call to :func:`registry`) and cheap: plugin modules return
:class:`BackendFactory` records; a backend object is created only when used. Every
plugin that fails -- at import, in a hook, in ``create()`` or in its probe -- is
recorded with its error and shown by ``device_report`` / ``rlx devices``; nothing
escapes into ``import rlx_core`` or into unrelated devices.

Controls (environment):

* ``RLX_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry points (``register_backends`` only).
* ``RLX_PLUGINS=cpu,cuda``: load only these entry-point names.
* ``RLX_BACKEND_<LABEL>=<backend name>``: when several plugins serve one device, use this
  one (otherwise the highest priority, then the alphabetically first name, wins).
"""
from __future__ import annotations

import logging
import os
import threading
import traceback
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Iterable

import pluggy

from ..errors import DeviceUnavailableError, PluginError, PolicyError
from .backend import Availability, Backend, BackendFactory
from .device import DEVICE_PRIORITY, Device, parse_device
from .hookspecs import RlxHookSpecs

__all__ = ["ENTRY_POINT_GROUP", "PluginRecord", "BackendEntry", "Registry", "registry",
           "register_backends", "reset_registry"]

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
        self._lock = threading.RLock()
        if autoload:
            self.load_entry_points()

    # --- loading --------------------------------------------------------------------
    def load_entry_points(self) -> None:
        if os.environ.get("RLX_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0"):
            log.info("RLX_DISABLE_PLUGIN_AUTOLOAD is set: no plugins loaded from entry points")
            return
        only = _env_list("RLX_PLUGINS")
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            rec = PluginRecord(ep.name, f"entry point {ep.value}",
                               distribution=dist.metadata["Name"] if dist else None,
                               version=dist.version if dist else None)
            if only is not None and ep.name not in only:
                rec.status, rec.error = "disabled", "not listed in RLX_PLUGINS"
                self.plugins.append(rec)
                continue
            try:
                obj = ep.load()
            except Exception as e:
                self._failed(rec, e)
                continue
            self._register(obj, rec)

    def register(self, plugin: Any, name: str | None = None) -> PluginRecord:
        """Register a hook-implementing module/object that is not installed as a plugin."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        return self._register(plugin, PluginRecord(name, "register_backends"))

    def _register(self, obj: Any, rec: PluginRecord) -> PluginRecord:
        with self._lock:
            try:
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
        rec.status, rec.error = "failed", f"{type(e).__name__}: {e}"
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
                f"no installed plugin serves device '{device.label}'. "
                f"Install one (e.g. pip install rlx-core[{device.label}]) or see `rlx devices`. "
                f"Served here: {', '.join(str(d) for d in self.devices()) or 'nothing'}")
        var = f"RLX_BACKEND_{device.label.upper()}"
        forced = os.environ.get(var, "").strip()
        if not forced:
            return entries[0]  # highest priority, then name (kept sorted)
        for e in entries:
            if e.name == forced:
                return e
        raise PolicyError(f"{var}={forced!r} names no backend for '{device.label}'; "
                          f"backends serving it: {', '.join(e.name for e in entries)}")

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

    def calibrate(self, backend: str, device: Device) -> dict | None:
        return self.pm.hook.rlx_calibrate(backend=backend, device=device)


def _priority_key(label: str):
    return (DEVICE_PRIORITY.index(label) if label in DEVICE_PRIORITY else len(DEVICE_PRIORITY), label)


def _env_list(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


_REGISTRY: Registry | None = None
_REG_LOCK = threading.Lock()


def registry() -> Registry:
    """The process-wide registry, loading entry points on first use."""
    global _REGISTRY
    with _REG_LOCK:
        if _REGISTRY is None:
            _REGISTRY = Registry()
        return _REGISTRY


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

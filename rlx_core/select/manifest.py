"""BackendsManifest: what is installed -- plugin distributions, versions, the devices each
serves, the plugin API each declares, and warnings about ``RLX_PLUGINS`` /
``RLX_BACKEND_<LABEL>`` values that match nothing -- as data or JSON, for deploy checks and
bug reports. Reading it loads plugin entry points (cheap by contract) but creates no backend
and probes nothing."""
from __future__ import annotations

import json
import platform
import sys
from dataclasses import asdict, dataclass

__all__ = ["BackendsManifest", "PluginInfo", "BackendInfo", "backends_manifest"]


@dataclass(frozen=True)
class BackendInfo:
    name: str
    device: str
    priority: int
    description: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class PluginInfo:
    """One plugin source: ``status`` loaded | failed | disabled, with the error if any;
    ``api`` is the RLX plugin API it declares (None: none declared), ``note`` a remark."""

    name: str
    origin: str
    distribution: str | None
    version: str | None
    status: str
    error: str
    backends: tuple[BackendInfo, ...]
    api: int | None = None
    note: str = ""


@dataclass(frozen=True)
class BackendsManifest:
    core_version: str
    python: str
    platform: str
    plugins: tuple[PluginInfo, ...]
    plugin_api: int = 1
    warnings: tuple[str, ...] = ()

    @classmethod
    def current(cls) -> "BackendsManifest":
        from .. import __version__
        from ..runtime.hookspecs import PLUGIN_API_VERSION
        from ..runtime.registry import iter_entries, registry
        reg = registry()
        by_plugin: dict[str, list[BackendInfo]] = {}
        for e in iter_entries(reg):
            f = e.factory
            by_plugin.setdefault(e.plugin, []).append(
                BackendInfo(f.name, f.device.label, f.priority, f.description, tuple(f.requires)))
        plugins = tuple(PluginInfo(p.name, p.origin, p.distribution, p.version, p.status, p.error,
                                   tuple(by_plugin.get(p.name, ())), p.api, p.note) for p in reg.plugins)
        return cls(__version__, platform.python_version(), f"{sys.platform}-{platform.machine().lower()}", plugins,
                   PLUGIN_API_VERSION, tuple(reg.env_warnings()))

    @property
    def devices(self) -> list[str]:
        """Device labels some loaded plugin serves (sorted, unique)."""
        return sorted({b.device for p in self.plugins for b in p.backends})

    def to_dict(self) -> dict:
        return {"core": {"name": "rlx-core", "version": self.core_version, "plugin_api": self.plugin_api},
                "python": self.python, "platform": self.platform, "devices": self.devices,
                "plugins": [asdict(p) for p in self.plugins], "warnings": list(self.warnings)}

    def json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


def backends_manifest() -> str:
    """The manifest as a JSON string (the seed's Python ``backends_manifest()``)."""
    return BackendsManifest.current().json()

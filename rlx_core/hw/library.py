"""The part NVML and AMD SMI providers share: a vendor library started on first use, and
sysfs/hwmon in its place when the library or its driver is absent.

A subclass sets ``device`` and ``library`` (for messages) and implements ``_start(module)``
(initialize, return the GPU handles) and the ``_read``/``_set_*`` calls on a handle. The
library is loaded once; a failure to load is remembered and reported by
``absence_reason``, and the sysfs provider for the same vendor serves instead when it
finds cards (amdgpu without ROCm's Python package, nouveau).
"""
from __future__ import annotations

import abc
import threading
from typing import Any, Callable

from ..errors import ThermalError
from .gpu import GpuTelemetryProvider, GpuThermal, ThermalUnavailableError

__all__ = ["LibraryProvider", "sensor"]


class LibraryProvider(GpuTelemetryProvider):
    library = ""

    def __init__(self, loader: Callable[[], Any], fallback: GpuTelemetryProvider | None = None):
        from .sysfs import SysfsProvider
        self._loader = loader
        self._lib_module = None
        self._handles: list = []
        self._error: str | None = None
        self._lock = threading.Lock()
        self.fallback = fallback if fallback is not None else SysfsProvider(self.device)

    # --- what subclasses implement ---------------------------------------------------------
    @abc.abstractmethod
    def _start(self, module) -> list:
        """Initialize the library; return one handle per GPU."""

    @abc.abstractmethod
    def _read(self, lib, handle) -> dict:
        """The GpuThermal fields of ``handle`` (None where a sensor does not report)."""

    # --- loading ------------------------------------------------------------------------------
    def _lib(self):
        with self._lock:
            if self._lib_module is None and self._error is None:
                try:
                    module = self._loader()
                except ImportError as e:
                    self._error = f"{self.device} telemetry needs {self.library}: {e}"
                else:
                    try:
                        self._handles = list(self._start(module))
                        self._lib_module = module
                    except Exception as e:  # the library's own error types
                        self._error = f"{self.library} could not start (no driver?): {e}"
            if self._lib_module is None:
                raise ThermalUnavailableError(self._error)
            return self._lib_module

    def _served_by_fallback(self) -> bool:
        """True when the library is unavailable and sysfs sees this vendor's cards."""
        try:
            self._lib()
            return False
        except ThermalUnavailableError:
            return self.fallback is not None and self.fallback.count() > 0

    def handle(self, index: int):
        self._lib()
        if not 0 <= index < len(self._handles):
            raise ThermalUnavailableError(f"{self.device}:{index}: {self.library} sees {len(self._handles)} GPU(s)")
        return self._handles[index]

    # --- the provider interface ---------------------------------------------------------------
    def count(self) -> int:
        if self._served_by_fallback():
            return self.fallback.count()
        try:
            self._lib()
        except ThermalError:
            return 0
        return len(self._handles)

    def absence_reason(self) -> str | None:
        if self.count():
            return None
        found = self._error or f"{self.library} sees no {self.device} GPU"
        fallback = self.fallback.absence_reason() if self.fallback is not None else None
        return f"{found}; {fallback}" if fallback else found

    def read(self, index: int) -> GpuThermal:
        if self._served_by_fallback():
            return self.fallback.read(index)
        lib, handle = self._lib(), self.handle(index)
        return GpuThermal(device=self.device, index=index, **self._read(lib, handle))

    def _call(self, name: str, index: int, *args):
        """``name`` on the fallback when it serves, else ``_<name>`` on the library's handle."""
        if self._served_by_fallback():
            return getattr(self.fallback, name)(index, *args)
        lib, handle = self._lib(), self.handle(index)
        method = getattr(self, f"_{name}", None)
        if method is None:
            return getattr(GpuTelemetryProvider, name)(self, index, *args)  # the "not supported" default
        return method(lib, handle, index, *args)

    def power_cap_range(self, index: int):
        return self._call("power_cap_range", index)

    def clock_range(self, index: int):
        return self._call("clock_range", index)

    def set_power_cap(self, index: int, watts: float) -> None:
        self._call("set_power_cap", index, watts)

    def set_locked_clocks(self, index: int, min_mhz: float, max_mhz: float) -> None:
        self._call("set_locked_clocks", index, min_mhz, max_mhz)

    def reset_locked_clocks(self, index: int) -> None:
        self._call("reset_locked_clocks", index)

    def set_fan_percent(self, index: int, percent: float) -> None:
        self._call("set_fan_percent", index, percent)

    def reset_fan(self, index: int) -> None:
        self._call("reset_fan", index)


def sensor(fn: Callable[[], Any], scale: float = 1.0) -> float | None:
    """``fn()`` as a float times ``scale``; None when the sensor errors or says N/A."""
    try:
        value = fn()
    except Exception:
        return None
    if value is None or value == "N/A":
        return None
    try:
        return float(value) * scale
    except (TypeError, ValueError):
        return None

"""AMD GPU telemetry through AMD SMI (ROCm's ``amdsmi`` Python package).

:class:`AmdSmiProvider` follows ``rlx_core.hw.GpuTelemetryProvider``: readings where
``None`` means "not reported", the power cap as the one control knob (needs root).
``amdsmi`` is imported and initialized on first use, never at import; without it (or
without the amdgpu driver) ``count()`` is 0 and reads raise ``ThermalUnavailableError``
saying why. Library status codes map by name: ``NOT_SUPPORTED`` -> unsupported,
``NO_PERM`` -> needs root, anything else -> a driver error with its code.
"""
from __future__ import annotations

import threading

from rlx_core.errors import ThermalError
from rlx_core.hw import (GpuTelemetryProvider, GpuThermal, ThermalDriverError, ThermalPermissionError,
                         ThermalUnavailableError, ThermalUnsupportedError)

__all__ = ["AmdSmiProvider", "read_fields"]


def _load_amdsmi():
    import amdsmi
    return amdsmi


class AmdSmiProvider(GpuTelemetryProvider):
    device = "rocm"

    def __init__(self, loader=_load_amdsmi):
        self._loader = loader
        self._smi = None
        self._handles: list = []
        self._lock = threading.Lock()

    def _lib(self):
        with self._lock:
            if self._smi is None:
                try:
                    smi = self._loader()
                except ImportError as e:
                    raise ThermalUnavailableError(f"rocm telemetry needs ROCm's amdsmi Python package: {e}") from None
                try:
                    smi.amdsmi_init()
                    handles = list(smi.amdsmi_get_processor_handles())
                except Exception as e:
                    raise ThermalUnavailableError(f"AMD SMI could not start (no amdgpu driver?): {e}") from None
                self._smi, self._handles = smi, handles
            return self._smi

    def count(self) -> int:
        try:
            self._lib()
        except ThermalError:
            return 0
        return len(self._handles)

    def _handle(self, index: int):
        self._lib()
        if not 0 <= index < len(self._handles):
            raise ThermalUnavailableError(f"rocm:{index}: AMD SMI sees {len(self._handles)} GPU(s)")
        return self._handles[index]

    def read(self, index: int) -> GpuThermal:
        smi, handle = self._lib(), self._handle(index)
        return GpuThermal(device="rocm", index=index, **read_fields(smi, handle))

    def power_cap_range(self, index: int):
        smi, handle = self._lib(), self._handle(index)
        try:
            info = smi.amdsmi_get_power_cap_info(handle)
        except Exception:
            return None
        return info["min_power_cap"] / 1e6, info["max_power_cap"] / 1e6  # microwatts

    def set_power_cap(self, index: int, watts: float) -> None:
        smi, handle = self._lib(), self._handle(index)
        try:
            smi.amdsmi_set_power_cap(handle, 0, int(watts * 1e6))
        except Exception as e:
            raise _mapped(smi, e, f"rocm:{index} power cap") from None


def read_fields(smi, handle) -> dict:
    """Each sensor AMD SMI reports for ``handle``; a sensor that errors is ``None``."""
    def get(fn, scale=1.0):
        try:
            value = fn()
            return None if value in (None, "N/A") else float(value) * scale
        except Exception:
            return None

    def temp(kind):
        return get(lambda: smi.amdsmi_get_temp_metric(handle, getattr(smi.AmdSmiTemperatureType, kind),
                                                      smi.AmdSmiTemperatureMetric.CURRENT))
    try:
        name = smi.amdsmi_get_gpu_asic_info(handle).get("market_name")
    except Exception:
        name = None

    def power():
        info = smi.amdsmi_get_power_info(handle)
        for key in ("current_socket_power", "average_socket_power", "socket_power"):
            if info.get(key) not in (None, "N/A"):
                return info[key]
        return None

    def fan():
        speed = smi.amdsmi_get_gpu_fan_speed(handle, 0)
        top = smi.amdsmi_get_gpu_fan_speed_max(handle, 0)
        return 100.0 * speed / top if top else None
    return {"name": name, "temp_c": temp("EDGE"), "hotspot_c": temp("HOTSPOT"), "mem_temp_c": temp("VRAM"),
            "power_w": get(power),
            "power_cap_w": get(lambda: smi.amdsmi_get_power_cap_info(handle)["power_cap"], 1e-6),
            "fan_percent": get(fan),
            "clock_mhz": get(lambda: smi.amdsmi_get_clock_info(handle, smi.AmdSmiClkType.GFX)["clk"]),
            "util_percent": get(lambda: smi.amdsmi_get_gpu_activity(handle)["gfx_activity"])}


def _mapped(smi, error: Exception, what: str) -> ThermalError:
    code = error.get_error_code() if hasattr(error, "get_error_code") else getattr(error, "err_code", None)
    status = getattr(smi, "amdsmi_wrapper", None)
    name = ""
    for attr in dir(status) if status is not None else ():
        if attr.startswith("AMDSMI_STATUS_") and getattr(status, attr) == code:
            name = attr
    if "NOT_SUPPORTED" in name:
        return ThermalUnsupportedError(f"{what}: not supported by this GPU or driver")
    if "NO_PERM" in name:
        return ThermalPermissionError(f"{what}: permission denied; run as root (sudo)")
    return ThermalDriverError(f"{what}: {error}", code if isinstance(code, int) else None)

"""AMD GPU telemetry and control through AMD SMI (ROCm's ``amdsmi`` Python package).

Imported and initialized on first read, never at import; without it (it ships with ROCm,
not on PyPI) or without the amdgpu driver, sysfs/hwmon serves the AMD cards it finds.
Readings: edge, hotspot (junction) and VRAM temperatures, socket power and cap
(microwatts in AMD SMI), fan duty, GFX and memory clocks, GFX and memory (UMC) activity,
VRAM used/total. Control: power cap and fan duty; clock locking is not offered (as in
the original: unsupported on ROCm). Library status codes map by name: ``NOT_SUPPORTED``
-> unsupported, ``NO_PERM`` -> needs root, anything else -> a driver error with its code.
"""
from __future__ import annotations

from ..errors import ThermalError
from .gpu import ThermalDriverError, ThermalPermissionError, ThermalUnsupportedError
from .library import LibraryProvider, sensor

__all__ = ["AmdSmiProvider", "read_fields"]


def _load_amdsmi():
    import amdsmi
    return amdsmi


class AmdSmiProvider(LibraryProvider):
    device = "rocm"
    library = "AMD SMI (ROCm's amdsmi Python package)"

    def __init__(self, loader=_load_amdsmi, fallback=None):
        super().__init__(loader, fallback)

    def _start(self, smi) -> list:
        smi.amdsmi_init()
        return list(smi.amdsmi_get_processor_handles())

    def _read(self, smi, handle) -> dict:
        return read_fields(smi, handle)

    def _power_cap_range(self, smi, handle, index):
        try:
            info = smi.amdsmi_get_power_cap_info(handle)
        except Exception:
            return None
        return info["min_power_cap"] / 1e6, info["max_power_cap"] / 1e6  # microwatts

    def _set_power_cap(self, smi, handle, index, watts):
        self._smi_call(smi, index, "power cap", smi.amdsmi_set_power_cap, handle, 0, int(watts * 1e6))

    def _set_fan_percent(self, smi, handle, index, percent):
        top = self._smi_call(smi, index, "fan speed", smi.amdsmi_get_gpu_fan_speed_max, handle, 0)
        self._smi_call(smi, index, "fan speed", smi.amdsmi_set_gpu_fan_speed, handle, 0, int(round(percent * top / 100)))

    def _reset_fan(self, smi, handle, index):
        self._smi_call(smi, index, "fan control", smi.amdsmi_reset_gpu_fan, handle, 0)

    @staticmethod
    def _smi_call(smi, index, what, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise _mapped(smi, e, f"rocm:{index} {what}") from None


def read_fields(smi, handle) -> dict:
    """Each sensor AMD SMI reports for ``handle``; a sensor that errors is ``None``."""
    def temp(kind):
        return sensor(lambda: smi.amdsmi_get_temp_metric(handle, getattr(smi.AmdSmiTemperatureType, kind),
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

    def vram(call):
        return call(handle, smi.AmdSmiMemoryType.VRAM)
    return {"name": name, "temp_c": temp("EDGE"), "hotspot_c": temp("HOTSPOT"), "mem_temp_c": temp("VRAM"),
            "power_w": sensor(power),
            "power_cap_w": sensor(lambda: smi.amdsmi_get_power_cap_info(handle)["power_cap"], 1e-6),
            "fan_percent": sensor(fan),
            "clock_mhz": sensor(lambda: smi.amdsmi_get_clock_info(handle, smi.AmdSmiClkType.GFX)["clk"]),
            "mem_clock_mhz": sensor(lambda: smi.amdsmi_get_clock_info(handle, smi.AmdSmiClkType.MEM)["clk"]),
            "util_percent": sensor(lambda: smi.amdsmi_get_gpu_activity(handle)["gfx_activity"]),
            "mem_util_percent": sensor(lambda: smi.amdsmi_get_gpu_activity(handle)["umc_activity"]),
            "mem_used_mib": sensor(lambda: vram(smi.amdsmi_get_gpu_memory_usage), 1 / 2**20),
            "mem_total_mib": sensor(lambda: vram(smi.amdsmi_get_gpu_memory_total), 1 / 2**20)}


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

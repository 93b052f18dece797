"""NVIDIA GPU telemetry and control through NVML (``nvidia-ml-py``, module ``pynvml``).

Imported and initialized on first read, never at import; without ``pynvml`` or a driver
the sysfs provider serves NVIDIA cards it finds (nouveau), else ``count()`` is 0 and
``absence_reason()`` says why. Readings (units as :class:`~rlx_core.hw.GpuThermal`):
GPU temperature; memory (HBM) temperature from the ``NVML_FI_DEV_MEMORY_TEMP`` field,
where 0 means "no sensor"; power draw and enforced cap (mW in NVML); fan duty; SM and
memory clocks; GPU and memory utilization; memory used/total. NVML has no hotspot
sensor, so ``hotspot_c`` is None.

Control: power cap (range from ``nvmlDeviceGetPowerManagementLimitConstraints``), locked
graphics clocks (range from the supported graphics clocks), fan duty on every fan (range
from ``nvmlDeviceGetMinMaxFanSpeed``; a GPU without fans is "unsupported" before any set
call). NVML return codes map to the ThermalError kinds as in the original project:
NOT_SUPPORTED (and FUNCTION_NOT_FOUND: an older driver) -> unsupported, NO_PERMISSION ->
needs root; library/driver/GPU missing or lost -> unavailable; anything else -> a driver
error carrying the code.
"""
from __future__ import annotations

from ..errors import ThermalError
from .gpu import (ThermalDriverError, ThermalPermissionError, ThermalRangeError, ThermalUnavailableError,
                  ThermalUnsupportedError)
from .library import LibraryProvider, sensor

__all__ = ["NvmlProvider", "read_fields", "mapped_error"]

# NVML return codes (nvml.h)
_UNSUPPORTED = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
_NO_PERMISSION = 4
_UNAVAILABLE = {1, 6, 9, 12, 15, 28}  # UNINITIALIZED, NOT_FOUND, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND,
#                                        GPU_IS_LOST, GPU_NOT_FOUND
_FI_DEV_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP


def _load_pynvml():
    import pynvml
    return pynvml


class NvmlProvider(LibraryProvider):
    device = "cuda"
    library = "NVML (nvidia-ml-py)"

    def __init__(self, loader=_load_pynvml, fallback=None):
        super().__init__(loader, fallback)

    def _start(self, nvml) -> list:
        nvml.nvmlInit()
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]

    def _read(self, nvml, handle) -> dict:
        return read_fields(nvml, handle)

    def _power_cap_range(self, nvml, handle, index):
        try:
            low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        except Exception:
            return None
        return low / 1000.0, high / 1000.0

    def _clock_range(self, nvml, handle, index):
        try:
            clocks = [c for mem in nvml.nvmlDeviceGetSupportedMemoryClocks(handle)
                      for c in nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, mem)]
            return (float(min(clocks)), float(max(clocks))) if clocks else None
        except Exception:
            return None

    def _set_power_cap(self, nvml, handle, index, watts):
        self._nvml_call(index, "power cap", nvml.nvmlDeviceSetPowerManagementLimit, handle, int(round(watts * 1000)))

    def _set_locked_clocks(self, nvml, handle, index, min_mhz, max_mhz):
        self._nvml_call(index, "locked clocks", nvml.nvmlDeviceSetGpuLockedClocks, handle, int(min_mhz), int(max_mhz))

    def _reset_locked_clocks(self, nvml, handle, index):
        self._nvml_call(index, "locked clocks", nvml.nvmlDeviceResetGpuLockedClocks, handle)

    def _set_fan_percent(self, nvml, handle, index, percent):
        fans = self._fans(nvml, handle, index)
        try:
            low, high = nvml.nvmlDeviceGetMinMaxFanSpeed(handle)
        except Exception:
            low, high = 0, 100
        if not low <= percent <= high:
            raise ThermalRangeError(f"cuda:{index} fan speed (%)", percent, low, high)
        for fan in range(fans):
            self._nvml_call(index, "fan speed", nvml.nvmlDeviceSetFanSpeed_v2, handle, fan, int(round(percent)))

    def _reset_fan(self, nvml, handle, index):
        for fan in range(self._fans(nvml, handle, index)):
            self._nvml_call(index, "fan control", nvml.nvmlDeviceSetDefaultFanSpeed_v2, handle, fan)

    def _fans(self, nvml, handle, index) -> int:
        fans = self._nvml_call(index, "fan control", nvml.nvmlDeviceGetNumFans, handle)
        if not fans:
            raise ThermalUnsupportedError(f"cuda:{index} fan control: this GPU has no fans NVML can drive")
        return int(fans)

    @staticmethod
    def _nvml_call(index, what, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise mapped_error(e, f"cuda:{index} {what}") from None


def read_fields(nvml, handle) -> dict:
    """Each sensor NVML reports for ``handle``; a sensor that errors is ``None``."""
    def name():
        n = nvml.nvmlDeviceGetName(handle)
        return n.decode() if isinstance(n, bytes) else n

    def memory_temp():
        (field,) = nvml.nvmlDeviceGetFieldValues(handle, [_FI_DEV_MEMORY_TEMP])
        return field.value.uiVal if field.nvmlReturn == 0 and field.value.uiVal else None

    try:
        gpu_name = name()
    except Exception:
        gpu_name = None
    return {"name": gpu_name,
            "temp_c": sensor(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "hotspot_c": None,
            "mem_temp_c": sensor(memory_temp),
            "power_w": sensor(lambda: nvml.nvmlDeviceGetPowerUsage(handle), 1e-3),
            "power_cap_w": sensor(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), 1e-3),
            "fan_percent": sensor(lambda: nvml.nvmlDeviceGetFanSpeed(handle)),
            "clock_mhz": sensor(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "mem_clock_mhz": sensor(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            "util_percent": sensor(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "mem_util_percent": sensor(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).memory),
            "mem_used_mib": sensor(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used, 1 / 2**20),
            "mem_total_mib": sensor(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total, 1 / 2**20)}


def mapped_error(error: Exception, what: str) -> ThermalError:
    """The ThermalError kind of an NVML error (its ``value`` is the NVML return code)."""
    code = getattr(error, "value", None)
    if code in _UNSUPPORTED:
        return ThermalUnsupportedError(f"{what}: not supported by this GPU or driver ({error})")
    if code == _NO_PERMISSION:
        return ThermalPermissionError(f"{what}: permission denied; run as root (sudo)")
    if code in _UNAVAILABLE:
        return ThermalUnavailableError(f"{what}: {error}")
    return ThermalDriverError(f"{what}: {error}", code if isinstance(code, int) else None)

"""GPU telemetry through NVML (the ``nvidia-ml-py`` package, module ``pynvml``).

:class:`NvmlProvider` follows ``rlx_core.hw.GpuTelemetryProvider`` (readings where
``None`` means "not reported", control knobs that need root). NVML is initialized on
first use, never at import; without ``pynvml`` or a driver, ``count()`` is 0 and
reads raise ``ThermalError`` subclasses naming the cause. NVML return codes map as in
the original project: NOT_SUPPORTED -> unsupported, NO_PERMISSION -> needs root.
"""
from __future__ import annotations

import threading

from rlx_core.errors import ThermalError

try:  # the core's telemetry interface, where this core has it
    from rlx_core.hw import (GpuTelemetryProvider, GpuThermal, ThermalDriverError, ThermalPermissionError,
                             ThermalUnavailableError, ThermalUnsupportedError)
except ImportError:  # older core: same behaviour, plain ThermalError kinds, dict readings
    GpuTelemetryProvider = object
    GpuThermal = None
    ThermalDriverError = ThermalPermissionError = ThermalUnavailableError = ThermalUnsupportedError = ThermalError

__all__ = ["NvmlProvider", "read_fields"]

_NOT_SUPPORTED, _NO_PERMISSION = 3, 4


def _load_pynvml():
    import pynvml
    return pynvml


class NvmlProvider(GpuTelemetryProvider):
    device = "cuda"

    def __init__(self, loader=_load_pynvml):
        self._loader = loader
        self._nvml = None
        self._lock = threading.Lock()

    def _lib(self):
        with self._lock:
            if self._nvml is None:
                try:
                    nvml = self._loader()
                    nvml.nvmlInit()
                except ImportError as e:
                    raise ThermalUnavailableError(f"cuda telemetry needs nvidia-ml-py (pynvml): {e}") from None
                except Exception as e:
                    raise ThermalUnavailableError(f"NVML could not start (no NVIDIA driver?): {e}") from None
                self._nvml = nvml
            return self._nvml

    def count(self) -> int:
        try:
            return int(self._lib().nvmlDeviceGetCount())
        except ThermalError:
            return 0

    def read(self, index: int):
        nvml = self._lib()
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:
            raise _mapped(e, f"cuda:{index}") from None
        fields = read_fields(nvml, handle)
        return GpuThermal(device="cuda", index=index, **fields) if GpuThermal else {"device": "cuda", "index": index,
                                                                                  **fields}

    def power_cap_range(self, index: int):
        nvml = self._lib()
        try:
            lo, hi = nvml.nvmlDeviceGetPowerManagementLimitConstraints(nvml.nvmlDeviceGetHandleByIndex(index))
        except Exception:
            return None
        return lo / 1000.0, hi / 1000.0

    def set_power_cap(self, index: int, watts: float) -> None:
        self._control(index, "power cap", lambda nvml, h: nvml.nvmlDeviceSetPowerManagementLimit(h, int(watts * 1000)))

    def set_locked_clocks(self, index: int, min_mhz: float, max_mhz: float) -> None:
        self._control(index, "locked clocks",
                      lambda nvml, h: nvml.nvmlDeviceSetGpuLockedClocks(h, int(min_mhz), int(max_mhz)))

    def reset_locked_clocks(self, index: int) -> None:
        self._control(index, "locked clocks", lambda nvml, h: nvml.nvmlDeviceResetGpuLockedClocks(h))

    def _control(self, index, what, call) -> None:
        nvml = self._lib()
        try:
            call(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
        except Exception as e:
            raise _mapped(e, f"cuda:{index} {what}") from None


def read_fields(nvml, handle) -> dict:
    """Each sensor NVML reports for ``handle``; a sensor that errors is ``None``."""
    def get(fn, scale=1.0):
        try:
            return fn() * scale
        except Exception:
            return None

    def name():
        n = nvml.nvmlDeviceGetName(handle)
        return n.decode() if isinstance(n, bytes) else n
    try:
        gpu_name = name()
    except Exception:
        gpu_name = None
    util = get(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    return {"name": gpu_name,
            "temp_c": get(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "mem_temp_c": None,
            "power_w": get(lambda: nvml.nvmlDeviceGetPowerUsage(handle), 1e-3),
            "power_cap_w": get(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), 1e-3),
            "fan_percent": get(lambda: nvml.nvmlDeviceGetFanSpeed(handle)),
            "clock_mhz": get(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "util_percent": util}


def _mapped(error: Exception, what: str) -> ThermalError:
    code = getattr(error, "value", None)
    if code == _NOT_SUPPORTED:
        return ThermalUnsupportedError(f"{what}: not supported by this GPU or driver")
    if code == _NO_PERMISSION:
        return ThermalPermissionError(f"{what}: permission denied; run as root (sudo)")
    if ThermalDriverError is ThermalError:
        return ThermalError(f"{what}: NVML error {code}: {error}")
    return ThermalDriverError(f"{what}: {error}", code)

"""The hardware under the runtime: host snapshot (CPU, caches, thermal state) and GPU
telemetry/control that GPU plugins provide."""
from .gpu import (GpuTelemetryProvider, GpuThermal, ThermalDriverError, ThermalPermissionError, ThermalRangeError,
                  ThermalUnavailableError, ThermalUnsupportedError, all_gpu_thermal, device_thermal,
                  device_thermal_count, power_cap_range, register_telemetry_provider, reset_fan,
                  reset_locked_clocks, set_fan_percent, set_locked_clocks, set_power_cap, telemetry_providers,
                  unregister_telemetry_provider)
from .snapshot import HwSnapshot, ThermalState, parse_pmset_therm, read_thermal

__all__ = ["HwSnapshot", "ThermalState", "read_thermal", "parse_pmset_therm", "GpuThermal",
           "GpuTelemetryProvider", "register_telemetry_provider", "unregister_telemetry_provider",
           "telemetry_providers", "device_thermal_count", "device_thermal", "all_gpu_thermal", "power_cap_range",
           "set_power_cap", "set_locked_clocks", "reset_locked_clocks", "set_fan_percent", "reset_fan",
           "ThermalUnavailableError", "ThermalUnsupportedError", "ThermalPermissionError", "ThermalRangeError",
           "ThermalDriverError"]

"""GPU telemetry through a provider, and validation of the control knobs."""
import math

import pytest

from rlx_core.errors import ThermalError
from rlx_core.hw import (GpuTelemetryProvider, GpuThermal, ThermalDriverError, ThermalPermissionError,
                         ThermalRangeError, ThermalUnavailableError, ThermalUnsupportedError, all_gpu_thermal,
                         device_thermal, device_thermal_count, power_cap_range, register_telemetry_provider,
                         reset_fan, reset_locked_clocks, set_fan_percent, set_locked_clocks, set_power_cap,
                         telemetry_providers, unregister_telemetry_provider)


class FakeNvml(GpuTelemetryProvider):
    """Two GPUs; index 1 reports no fan and no hotspot; setters record or refuse."""

    device = "cuda"

    def __init__(self, root=True):
        self.root = root
        self.calls = []

    def count(self):
        return 2

    def read(self, index):
        return GpuThermal("cuda", index, name=f"Fake H{index}", temp_c=55.0 + index, power_w=300.0,
                          power_cap_w=700.0, fan_percent=None if index else 40.0, clock_mhz=1980.0,
                          util_percent=97.0)

    def power_cap_range(self, index):
        return (200.0, 700.0)

    def set_power_cap(self, index, watts):
        if not self.root:
            raise ThermalPermissionError("setting the power cap needs root: run as root (sudo)")
        self.calls.append(("power", index, watts))

    def set_locked_clocks(self, index, lo, hi):
        self.calls.append(("clocks", index, lo, hi))

    def reset_locked_clocks(self, index):
        self.calls.append(("reset_clocks", index))


class BrokenRocm(GpuTelemetryProvider):
    device = "rocm"

    def count(self):
        raise ThermalDriverError("rsmi_init failed", code=8)

    def read(self, index):
        raise AssertionError("never reached: count() failed")


@pytest.fixture(autouse=True)
def own_providers():
    """Only this module's providers during a test; the installed plugins' ones (which
    register when the registry loads them) come back afterwards."""
    saved = telemetry_providers()
    for label in saved:
        unregister_telemetry_provider(label)
    yield
    for label in telemetry_providers():
        unregister_telemetry_provider(label)
    for provider in saved.values():
        register_telemetry_provider(provider)


@pytest.fixture
def nvml():
    provider = FakeNvml()
    register_telemetry_provider(provider)
    return provider


def test_readings_keep_unreported_sensors_as_none(nvml):
    assert device_thermal_count("nvidia") == 2
    first, second = device_thermal("cuda", 0), device_thermal("cuda", 1)
    assert first.fan_percent == 40.0 and second.fan_percent is None
    assert second.hotspot_c is None and second.mem_temp_c is None
    assert all_gpu_thermal() == [first, second]
    assert math.isclose(first.power_headroom(), 1 - 300 / 700)
    assert GpuThermal("cuda", 0, power_w=300.0).power_headroom() is None
    assert GpuThermal("cuda", 0, power_w=900.0, power_cap_w=700.0).power_headroom() == 0.0


def test_no_provider_means_no_gpus():
    assert device_thermal_count("cpu") == 0
    with pytest.raises(ThermalUnsupportedError, match="no GPU telemetry for device 'metal'"):
        device_thermal("metal")


def test_bad_index_names_the_count(nvml):
    with pytest.raises(ThermalUnavailableError, match="no GPU index 2; the driver reports 2"):
        device_thermal("cuda", 2)


def test_failing_provider_is_skipped_not_fatal(nvml):
    register_telemetry_provider(BrokenRocm())
    assert device_thermal_count("rocm") == 0
    assert [t.device for t in all_gpu_thermal()] == ["cuda", "cuda"]


def test_power_cap_validated_against_driver_range(nvml):
    assert power_cap_range("cuda", 0) == (200.0, 700.0)
    set_power_cap("cuda", 0, 450)
    set_power_cap("cuda", 1, 700.4)  # within the rounding tolerance
    assert nvml.calls == [("power", 0, 450), ("power", 1, 700.4)]
    with pytest.raises(ThermalRangeError, match=r"800 is outside the allowed range \[200, 700\]") as e:
        set_power_cap("cuda", 0, 800)
    assert (e.value.requested, e.value.low, e.value.high) == (800, 200.0, 700.0)
    with pytest.raises(ThermalRangeError, match=r"\(0, inf\]"):
        set_power_cap("cuda", 0, 0)
    with pytest.raises(ThermalError, match="must be a finite number, got nan"):
        set_power_cap("cuda", 0, float("nan"))
    with pytest.raises(ThermalError, match="must be a finite number, got '300'"):
        set_power_cap("cuda", 0, "300")


def test_permission_error_reaches_the_caller(nvml):
    nvml.root = False
    with pytest.raises(ThermalPermissionError, match="sudo"):
        set_power_cap("cuda", 0, 300)


def test_clock_and_fan_knobs(nvml):
    set_locked_clocks("cuda", 0, 1000, 1500)
    reset_locked_clocks("cuda", 0)
    assert nvml.calls == [("clocks", 0, 1000, 1500), ("reset_clocks", 0)]
    with pytest.raises(ThermalRangeError):
        set_locked_clocks("cuda", 0, 1500, 1000)
    with pytest.raises(ThermalRangeError, match=r"fan speed \(%\) 120"):
        set_fan_percent("cuda", 0, 120)
    with pytest.raises(ThermalUnsupportedError, match="setting the fan speed is not supported"):
        set_fan_percent("cuda", 0, 50)
    with pytest.raises(ThermalUnsupportedError, match="resetting the fan"):
        reset_fan("cuda", 0)


def test_provider_must_be_a_provider():
    with pytest.raises(ThermalError, match="expected a GpuTelemetryProvider"):
        register_telemetry_provider(object())

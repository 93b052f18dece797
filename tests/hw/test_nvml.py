"""NVML telemetry. Against the real ``pynvml`` on this GPU-less machine: no library, so
no GPUs and the reason; NVML's own exception classes mapped to the ThermalError kinds.
What needs a GPU -- the readings and the control calls -- is checked here only against
``RecordedNvml``, an object answering with values recorded from an H200's NVML (units as
NVML returns them); scripts/gpu_check_rlx_gpu.sh checks the real thing on the H200."""
import types

import pytest

from rlx_core.hw import (GpuThermal, ThermalDriverError, ThermalPermissionError, ThermalRangeError,
                         ThermalUnavailableError, ThermalUnsupportedError, register_telemetry_provider,
                         set_fan_percent, set_locked_clocks, set_power_cap, telemetry_providers,
                         unregister_telemetry_provider)
from rlx_core.hw.nvml import NvmlProvider, mapped_error
from rlx_core.hw.sysfs import SysfsProvider
from rlx_core.testing.sysfs import make_card

pynvml = pytest.importorskip("pynvml")


def test_real_pynvml_without_a_driver_reports_no_gpus_and_why(tmp_path):
    provider = NvmlProvider(fallback=SysfsProvider("cuda", tmp_path))
    assert provider.count() == 0
    assert "NVML (nvidia-ml-py) could not start (no driver?): NVML Shared Library Not Found" in \
        provider.absence_reason()
    with pytest.raises(ThermalUnavailableError, match="Shared Library Not Found"):
        provider.read(0)


def test_without_nvml_sysfs_serves_nvidia_cards(tmp_path):
    make_card(tmp_path, 0, "0x10de", "0x2335", hwmon={"name": "nouveau", "temp1_input": "40000"})
    provider = NvmlProvider(fallback=SysfsProvider("cuda", tmp_path))
    assert provider.count() == 1 and provider.read(0).temp_c == 40.0
    with pytest.raises(ThermalUnsupportedError, match="no power1_cap"):
        provider.set_power_cap(0, 100)


@pytest.mark.parametrize("code, kind", [
    (pynvml.NVML_ERROR_NOT_SUPPORTED, ThermalUnsupportedError),
    (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, ThermalUnsupportedError),
    (pynvml.NVML_ERROR_NO_PERMISSION, ThermalPermissionError),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, ThermalUnavailableError),
    (pynvml.NVML_ERROR_GPU_IS_LOST, ThermalUnavailableError),
    (pynvml.NVML_ERROR_INVALID_ARGUMENT, ThermalDriverError),
    (pynvml.NVML_ERROR_UNKNOWN, ThermalDriverError)])
def test_nvml_errors_map_to_the_originals_kinds(code, kind):
    error = pynvml.NVMLError(code)  # pynvml's own subclass for the code
    assert type(error) is not pynvml.NVMLError
    mapped = mapped_error(error, "cuda:0 power cap")
    assert type(mapped) is kind and str(mapped).startswith("cuda:0 power cap")
    if kind is ThermalDriverError:
        assert mapped.code == code
    if kind is ThermalPermissionError:
        assert "run as root (sudo)" in str(mapped)


class RecordedNvml:
    """pynvml's calls as an H200 (driver 580) answered them; setters record their calls
    and fail as NVML does for a non-root caller. Limited: it proves the mapping of
    values and the checks made before a set call, not NVML's behaviour."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2

    def __init__(self, fans=0):
        self.fans, self.calls = fans, []

    def nvmlInit(self): pass
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, i): return f"h{i}"
    def nvmlDeviceGetName(self, h): return "NVIDIA H200"
    def nvmlDeviceGetTemperature(self, h, sensor): return 34
    def nvmlDeviceGetPowerUsage(self, h): return 76123  # mW
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700000
    def nvmlDeviceGetPowerManagementLimitConstraints(self, h): return (200000, 700000)
    def nvmlDeviceGetFanSpeed(self, h): raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    def nvmlDeviceGetClockInfo(self, h, clock): return {1: 345, 2: 3201}[clock]
    def nvmlDeviceGetUtilizationRates(self, h): return types.SimpleNamespace(gpu=0, memory=0)
    def nvmlDeviceGetMemoryInfo(self, h): return types.SimpleNamespace(used=581 * 2**20, total=143771 * 2**20)
    def nvmlDeviceGetSupportedMemoryClocks(self, h): return [3201]
    def nvmlDeviceGetSupportedGraphicsClocks(self, h, mem): return [1980, 1500, 345]
    def nvmlDeviceGetNumFans(self, h): return self.fans
    def nvmlDeviceGetMinMaxFanSpeed(self, h): return (30, 100)

    def nvmlDeviceGetFieldValues(self, h, ids):
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=38))]

    def _denied(self, *call):
        self.calls.append(call)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    def nvmlDeviceSetPowerManagementLimit(self, h, mw): self._denied("power", mw)
    def nvmlDeviceSetGpuLockedClocks(self, h, lo, hi): self._denied("clocks", lo, hi)
    def nvmlDeviceSetFanSpeed_v2(self, h, fan, pct): self._denied("fan", fan, pct)


@pytest.fixture
def recorded():
    lib = RecordedNvml()
    saved = telemetry_providers().get("cuda")
    register_telemetry_provider(NvmlProvider(loader=lambda: lib))
    yield lib
    unregister_telemetry_provider("cuda")
    if saved is not None and saved is not telemetry_providers().get("cuda"):
        register_telemetry_provider(saved)


def test_readings_map_nvml_units_and_unreported_sensors(recorded):
    t = NvmlProvider(loader=lambda: recorded).read(0)
    assert t == GpuThermal("cuda", 0, name="NVIDIA H200", temp_c=34.0, hotspot_c=None, mem_temp_c=38.0,
                           power_w=pytest.approx(76.123), power_cap_w=700.0, fan_percent=None, clock_mhz=345.0,
                           util_percent=0.0, mem_clock_mhz=3201.0, mem_util_percent=0.0, mem_used_mib=581.0,
                           mem_total_mib=143771.0)


def test_out_of_range_requests_never_reach_a_set_call(recorded):
    with pytest.raises(ThermalRangeError, match=r"cuda:0 power cap \(W\) 1 is outside the allowed range \[200, 700\]"):
        set_power_cap("cuda", 0, 1)
    with pytest.raises(ThermalRangeError, match=r"max clock \(MHz\) 99999 is outside the allowed range \[345, 1980\]"):
        set_locked_clocks("cuda", 0, 1000, 99999)
    with pytest.raises(ThermalUnsupportedError, match="this GPU has no fans"):
        set_fan_percent("cuda", 0, 50)
    assert recorded.calls == []
    recorded.fans = 2
    with pytest.raises(ThermalRangeError, match=r"fan speed \(%\) 20 is outside the allowed range \[30, 100\]"):
        set_fan_percent("cuda", 0, 20)
    assert recorded.calls == []


def test_in_range_requests_report_the_drivers_refusal(recorded):
    with pytest.raises(ThermalPermissionError, match="cuda:0 power cap: permission denied; run as root"):
        set_power_cap("cuda", 0, 450)
    with pytest.raises(ThermalPermissionError, match="locked clocks"):
        set_locked_clocks("cuda", 0, 1000, 1500)
    assert recorded.calls == [("power", 450000), ("clocks", 1000, 1500)]

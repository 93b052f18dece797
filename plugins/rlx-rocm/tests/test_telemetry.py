"""AMD SMI telemetry: registered for rocm, no import of amdsmi until read, readings from a
stand-in amdsmi module, and a reason where there is none."""
import types

import pytest

from rlx_core.errors import ThermalError
from rlx_rocm.telemetry import AmdSmiProvider


class _Error(Exception):
    def __init__(self, code):
        super().__init__(f"status {code}")
        self.code = code

    def get_error_code(self):
        return self.code


def _fake_amdsmi():
    smi = types.SimpleNamespace()
    smi.AmdSmiTemperatureType = types.SimpleNamespace(EDGE=0, HOTSPOT=1, VRAM=2)
    smi.AmdSmiTemperatureMetric = types.SimpleNamespace(CURRENT=0)
    smi.AmdSmiClkType = types.SimpleNamespace(GFX=0)
    smi.amdsmi_wrapper = types.SimpleNamespace(AMDSMI_STATUS_NOT_SUPPORTED=2, AMDSMI_STATUS_NO_PERM=10)
    smi.amdsmi_init = lambda: None
    smi.amdsmi_get_processor_handles = lambda: ["gpu0"]
    smi.amdsmi_get_gpu_asic_info = lambda h: {"market_name": "AMD Instinct MI300X"}
    smi.amdsmi_get_temp_metric = lambda h, kind, metric: {0: 41, 1: 55}.get(kind) or (_ for _ in ()).throw(_Error(2))
    smi.amdsmi_get_power_info = lambda h: {"current_socket_power": 312, "average_socket_power": "N/A"}
    smi.amdsmi_get_power_cap_info = lambda h: {"power_cap": 750_000_000, "min_power_cap": 300_000_000,
                                                "max_power_cap": 750_000_000}
    smi.amdsmi_get_gpu_fan_speed = lambda h, i: (_ for _ in ()).throw(_Error(2))
    smi.amdsmi_get_gpu_fan_speed_max = lambda h, i: 255
    smi.amdsmi_get_clock_info = lambda h, kind: {"clk": 2100}
    smi.amdsmi_get_gpu_activity = lambda h: {"gfx_activity": 87}

    def set_cap(h, sensor, cap):
        raise _Error(10)
    smi.amdsmi_set_power_cap = set_cap
    return smi


@pytest.mark.no_platform
def test_the_provider_is_registered_for_rocm():
    from rlx_core.hw import telemetry_providers
    assert isinstance(telemetry_providers().get("rocm"), AmdSmiProvider)


@pytest.mark.no_platform
def test_readings_come_from_amd_smi_and_missing_sensors_are_none():
    p = AmdSmiProvider(loader=_fake_amdsmi)
    assert p.count() == 1
    t = p.read(0)
    assert (t.name, t.temp_c, t.hotspot_c, t.mem_temp_c) == ("AMD Instinct MI300X", 41.0, 55.0, None)
    assert (t.power_w, t.power_cap_w, t.fan_percent, t.clock_mhz, t.util_percent) == (312.0, 750.0, None, 2100.0, 87.0)
    assert p.power_cap_range(0) == (300.0, 750.0)
    with pytest.raises(ThermalError, match="run as root"):
        p.set_power_cap(0, 500)
    with pytest.raises(ThermalError, match="sees 1 GPU"):
        p.read(3)


@pytest.mark.no_platform
def test_without_amdsmi_there_is_nothing_to_read_and_the_reason_says_so():
    def missing():
        raise ImportError("No module named 'amdsmi'")
    p = AmdSmiProvider(loader=missing)
    assert p.count() == 0
    with pytest.raises(ThermalError, match="amdsmi"):
        p.read(0)

"""GPU telemetry from sysfs/hwmon, read from a sysfs tree laid out as the kernel does
(rlx_core.testing.sysfs): sensors by label and unit, missing files as None, control by
writing the hwmon files, and the errors of writes that fail."""
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from rlx_core.hw import ThermalUnavailableError, ThermalUnsupportedError
from rlx_core.hw.sysfs import SysfsProvider
from rlx_core.testing.sysfs import AMDGPU_DEVICE, AMDGPU_HWMON, make_card


@pytest.fixture
def tree(tmp_path):
    """card0: an ASPEED BMC adapter (skipped); card1: amdgpu with every sensor; card2: an
    Intel GPU with only a power cap and its frequency; card3: amdgpu without hwmon."""
    make_card(tmp_path, 0, "0x1a03", "0x2000", hwmon={"name": "ast"})
    make_card(tmp_path, 1, "0x1002", "0x740f", hwmon=AMDGPU_HWMON, files=AMDGPU_DEVICE | {"product_name": "MI210"})
    make_card(tmp_path, 2, "0x8086", "0x56a0", hwmon={"name": "i915", "power1_max": "190000000"},
              card_files={"gt_cur_freq_mhz": "2050"})
    make_card(tmp_path, 3, "0x1002", "0x73bf")
    return tmp_path


def test_cards_are_found_by_vendor_and_numbered_in_order(tree):
    assert [p.name for p in SysfsProvider("rocm", tree).cards()] == ["card1", "card3"]
    assert SysfsProvider("gpu", tree).count() == 1 and SysfsProvider("cuda", tree).count() == 0
    assert "no cuda card under" in SysfsProvider("cuda", tree).absence_reason()
    assert SysfsProvider("rocm", tree / "absent").count() == 0


def test_every_amdgpu_sensor_in_its_unit(tree):
    t = SysfsProvider("rocm", tree).read(0)
    assert (t.device, t.index, t.name) == ("rocm", 0, "MI210")
    assert (t.temp_c, t.hotspot_c, t.mem_temp_c) == (41.0, 55.0, 48.0)
    assert (t.power_w, t.power_cap_w) == (312.0, 300.0)
    assert t.fan_percent == pytest.approx(40.0)
    assert (t.clock_mhz, t.mem_clock_mhz) == (1700.0, 1600.0)
    assert (t.util_percent, t.mem_util_percent, t.mem_used_mib, t.mem_total_mib) == (87.0, 12.0, 3072.0, 65536.0)


def test_sensors_a_driver_does_not_export_are_none_never_zero(tree):
    intel = SysfsProvider("gpu", tree).read(0)
    assert intel.name == "i915 [8086:56a0]" and intel.clock_mhz == 2050.0
    assert all(getattr(intel, f) is None for f in ("temp_c", "hotspot_c", "mem_temp_c", "power_w", "power_cap_w",
                                                   "fan_percent", "util_percent", "mem_total_mib"))
    bare = SysfsProvider("rocm", tree).read(1)  # no hwmon at all
    assert bare.name == "PCI [1002:73bf]" and bare.temp_c is None and bare.power_w is None
    with pytest.raises(ThermalUnavailableError, match="sysfs lists 2 rocm GPU"):
        SysfsProvider("rocm", tree).read(2)


def test_unlabelled_temp1_is_the_gpu_temperature_and_bad_values_are_none(tmp_path):
    make_card(tmp_path, 0, "0x10de", "0x1e84", hwmon={"name": "nouveau", "temp1_input": "38000",
                                                       "power1_input": "garbage", "pwm1": "255"})
    t = SysfsProvider("cuda", tmp_path).read(0)
    assert (t.temp_c, t.power_w, t.fan_percent) == (38.0, None, 100.0)


def test_control_writes_the_hwmon_files(tree):
    p = SysfsProvider("rocm", tree)
    mon = tree / "devices" / "pci0000:00" / "0000:01:00.0" / "hwmon" / "hwmon0"
    assert p.power_cap_range(0) == (0.0, 300.0)
    p.set_power_cap(0, 250.5)
    assert (mon / "power1_cap").read_text() == "250500000\n"
    p.set_fan_percent(0, 50)
    assert ((mon / "pwm1_enable").read_text(), (mon / "pwm1").read_text()) == ("1\n", "128\n")
    p.reset_fan(0)
    assert (mon / "pwm1_enable").read_text() == "2\n"
    assert p.power_cap_range(1) is None
    with pytest.raises(ThermalUnsupportedError, match=r"rocm:1 power cap: not supported by this driver \(no "
                                                      r"power1_cap"):
        p.set_power_cap(1, 100)
    with pytest.raises(ThermalUnsupportedError, match="locking clocks is not supported"):
        p.set_locked_clocks(0, 1000, 1500)


def test_a_write_without_permission_is_a_permission_error():
    """Run as an unprivileged user (dropped from root here when needed) against a card
    whose power1_cap is read-only: the kernel's EACCES becomes ThermalPermissionError.
    (A tree of its own directly under the temp folder, which that user can reach.)"""
    root = Path(tempfile.mkdtemp(prefix="rlx-sysfs-"))
    try:
        root.chmod(0o755)
        make_card(root, 1, "0x1002", hwmon=AMDGPU_HWMON)
        (root / "devices" / "pci0000:00" / "0000:01:00.0" / "hwmon" / "hwmon0" / "power1_cap").chmod(0o444)
        code = textwrap.dedent(f"""
            import os
            from rlx_core.hw.sysfs import SysfsProvider
            from rlx_core.hw import ThermalPermissionError
            if os.getuid() == 0:  # (imports first: the unprivileged user may not read the venv)
                os.setgid(65534); os.setuid(65534)
            try:
                SysfsProvider("rocm", {str(root)!r}).set_power_cap(0, 200)
            except ThermalPermissionError as e:
                print("permission:", e)
        """)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    finally:
        shutil.rmtree(root)
    assert "permission: rocm:0 power cap: permission denied writing" in done.stdout, done.stderr
    assert "run as root (sudo)" in done.stdout

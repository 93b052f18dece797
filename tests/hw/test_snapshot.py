"""HwSnapshot and thermal state, read from fake /proc and /sys trees."""
import dataclasses
import platform

import pytest

from rlx_core.hw import HwSnapshot, ThermalState, parse_pmset_therm, read_thermal
from rlx_core.hw.snapshot import parse_size

linux_only = pytest.mark.skipif(platform.system() != "Linux", reason="reads the Linux /proc and /sys layout")

CPUINFO = """processor\t: 0
model name\t: Test CPU 9000
physical id\t: 0
core id\t\t: 0

processor\t: 1
model name\t: Test CPU 9000
physical id\t: 0
core id\t\t: 1

processor\t: 2
model name\t: Test CPU 9000
physical id\t: 1
core id\t\t: 0

processor\t: 3
model name\t: Test CPU 9000
physical id\t: 1
core id\t\t: 0
"""


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def host(tmp_path):
    write(tmp_path, "proc/cpuinfo", CPUINFO)
    cache = "sys/devices/system/cpu/cpu0/cache"
    for i, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                             ("2", "Unified", "2048K"), ("3", "Unified", "105M")]):
        write(tmp_path, f"{cache}/index{i}/level", level)
        write(tmp_path, f"{cache}/index{i}/type", kind)
        write(tmp_path, f"{cache}/index{i}/size", size)
        write(tmp_path, f"{cache}/index{i}/coherency_line_size", "64")
    return tmp_path


def zone(root, n, temp_milli, trips=(("passive", 95000), ("critical", 105000)), kind="x86_pkg_temp"):
    write(root, f"sys/class/thermal/thermal_zone{n}/type", kind)
    write(root, f"sys/class/thermal/thermal_zone{n}/temp", str(temp_milli))
    for i, (ttype, ttemp) in enumerate(trips):
        write(root, f"sys/class/thermal/thermal_zone{n}/trip_point_{i}_type", ttype)
        write(root, f"sys/class/thermal/thermal_zone{n}/trip_point_{i}_temp", str(ttemp))


def cooling(root, n, kind, state, max_state=10):
    write(root, f"sys/class/thermal/cooling_device{n}/type", kind)
    write(root, f"sys/class/thermal/cooling_device{n}/cur_state", str(state))
    write(root, f"sys/class/thermal/cooling_device{n}/max_state", str(max_state))


@pytest.mark.parametrize("text,size", [("48K", 48 << 10), ("2048K", 2 << 20), ("105M", 105 << 20), ("64", 64),
                                       ("1G", 1 << 30), ("2MiB", 2 << 20), ("lots", None), ("", None)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@linux_only
def test_cpu_and_caches_from_proc_and_sys(host):
    snap = HwSnapshot.collect(root=str(host))
    assert snap.cpu_brand == "Test CPU 9000"
    assert snap.physical_cores == 3  # (0,0) (0,1) (1,0); cpu 3 is an SMT sibling of cpu 2
    assert snap.perf_cores == 3
    assert (snap.l1d_bytes, snap.l2_bytes, snap.l3_bytes, snap.cache_line) == (48 << 10, 2 << 20, 105 << 20, 64)
    assert snap.os == "linux" and snap.total_cpus >= 1 and 1 <= snap.available_cpus <= snap.total_cpus


@linux_only
def test_hybrid_cpu_counts_performance_cores(host):
    write(host, "sys/devices/cpu_core/cpus", "0-7,16-19\n")
    assert HwSnapshot.collect(root=str(host)).perf_cores == 12


@linux_only
def test_thermal_unknown_when_nothing_is_readable(host):
    state = read_thermal(str(host))
    assert state.state == "unknown" and not state.is_throttled
    assert not HwSnapshot.collect(root=str(host)).is_throttled()


@linux_only
def test_thermal_nominal_below_trip_points(host):
    zone(host, 0, 61000)
    zone(host, 1, 45500, kind="acpitz")
    cooling(host, 0, "Processor", 0)
    state = read_thermal(str(host))
    assert state.state == "nominal" and state.max_temp_c == 61.0


@linux_only
def test_thermal_throttled_at_passive_trip(host):
    zone(host, 0, 96000)
    state = read_thermal(str(host))
    assert state.is_throttled and "thermal_zone0" in state.reason and "passive" in state.reason
    assert HwSnapshot.collect(root=str(host)).is_throttled()


@linux_only
def test_thermal_throttled_by_active_cpu_cooling_device(host):
    zone(host, 0, 70000)
    cooling(host, 0, "Fan", 3)  # a fan spinning is not CPU throttling
    cooling(host, 1, "Processor", 2)
    state = read_thermal(str(host))
    assert state.is_throttled and "cooling_device1 (processor) at state 2/10" in state.reason


@linux_only
def test_cpu_speed_percentage_from_cpufreq(host):
    for cpu, cur in ((0, 1500000), (1, 3000000)):
        write(host, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq", str(cur))
        write(host, f"sys/devices/system/cpu/cpu{cpu}/cpufreq/cpuinfo_max_freq", "3000000")
    zone(host, 0, 50000)
    assert read_thermal(str(host)).cpu_speed_pct == 75.0


def test_pmset_throttled():
    text = "Note: No thermal warning level has been recorded\n" \
           "CPU Power notify\n\tCPU_Scheduler_Limit \t= 100\n\tCPU_Available_CPUs \t= 8\n\tCPU_Speed_Limit \t= 62\n"
    state = parse_pmset_therm(text)
    assert state.is_throttled and state.cpu_speed_pct == 62 and state.sched_pct == 100
    assert "speed limit 62%" in state.reason


def test_pmset_nominal_and_unknown():
    ok = parse_pmset_therm("CPU_Scheduler_Limit = 100\nCPU_Speed_Limit = 100\n")
    assert ok.state == "nominal" and not ok.is_throttled
    assert parse_pmset_therm("Note: No thermal warning level has been recorded\n").state == "nominal"
    assert parse_pmset_therm("").state == "unknown"


def test_fingerprint_ignores_thermal_but_not_hardware():
    snap = HwSnapshot.collect()
    hot = dataclasses.replace(snap, thermal=ThermalState("throttled", "test"))
    assert hot.fingerprint() == snap.fingerprint()
    assert len(snap.fingerprint()) == 16
    assert dataclasses.replace(snap, available_cpus=snap.available_cpus + 1).fingerprint() != snap.fingerprint()
    assert dataclasses.replace(snap, l2_bytes=(snap.l2_bytes or 0) + 1).fingerprint() != snap.fingerprint()


def test_real_host_snapshot_is_consistent():
    snap = HwSnapshot.collect()
    assert snap.total_cpus >= snap.available_cpus >= 1
    assert snap.thermal.state in ("nominal", "throttled", "unknown")
    assert snap.as_dict()["cpu_brand"] == snap.cpu_brand

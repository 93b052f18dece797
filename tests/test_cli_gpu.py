"""``rlx gpu`` over the sysfs provider reading a sysfs tree laid out as the kernel does
(no GPU here): table and JSON with missing sensors as "-"/null, device and index
selection, bounded --watch/--count, the rich live table, control and its exit codes."""
import io
import json
import time

import pytest

from rlx_core.cli import main
from rlx_core.cli_gpu import HEADER, rich_table, table_rows, watch
from rlx_core.hw import register_telemetry_provider, telemetry_providers, unregister_telemetry_provider
from rlx_core.hw.sysfs import SysfsProvider
from rlx_core.testing.sysfs import AMDGPU_DEVICE, AMDGPU_HWMON, make_card


@pytest.fixture
def sysfs(tmp_path):
    """Every device label read from one tree: two amdgpu cards (the second without
    hwmon) and an Intel card; no NVIDIA card. Returns the first card's hwmon directory."""
    make_card(tmp_path, 0, "0x1002", "0x740f", hwmon=AMDGPU_HWMON, files=AMDGPU_DEVICE | {"product_name": "MI210"})
    make_card(tmp_path, 1, "0x1002", "0x73bf")
    make_card(tmp_path, 2, "0x8086", "0x56a0", hwmon={"name": "i915"}, card_files={"gt_cur_freq_mhz": "2050"})
    saved = {label: p for label, p in telemetry_providers().items()}
    for label in ("cuda", "rocm", "gpu"):
        register_telemetry_provider(SysfsProvider(label, tmp_path))
    yield tmp_path / "devices" / "pci0000:00" / "0000:00:00.0" / "hwmon" / "hwmon0"
    for label in ("cuda", "rocm", "gpu"):
        unregister_telemetry_provider(label)
    for label, provider in saved.items():
        if telemetry_providers().get(label) is not provider:
            register_telemetry_provider(provider)


def test_json_lists_every_gpu_with_null_for_missing_sensors(sysfs, capsys):
    assert main(["gpu", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["device"], r["index"]) for r in rows] == [("gpu", 0), ("rocm", 0), ("rocm", 1)]
    mi210 = rows[1]
    assert (mi210["name"], mi210["temp_c"], mi210["hotspot_c"], mi210["mem_temp_c"]) == ("MI210", 41.0, 55.0, 48.0)
    assert (mi210["power_w"], mi210["power_cap_w"], mi210["mem_total_mib"]) == (312.0, 300.0, 65536.0)
    assert rows[2]["temp_c"] is None and rows[2]["power_w"] is None and rows[0]["clock_mhz"] == 2050.0
    assert set(rows[0]) >= {"temp_c", "hotspot_c", "mem_temp_c", "power_w", "power_cap_w", "fan_percent", "clock_mhz",
                            "mem_clock_mhz", "util_percent", "mem_util_percent", "mem_used_mib", "mem_total_mib"}


def test_table_shows_missing_sensors_as_dashes(sysfs, capsys):
    assert main(["gpu", "--device", "amd"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:3] == ["DEV", "IDX", "NAME"]
    mi210, bare = out[3], out[4]
    for cell in ("MI210", "41 C", "55 C", "48 C", "312.0 W", "300 W", "40 %", "1700 MHz", "1600 MHz", "87 %",
                 "3.0 / 64.0 GiB"):
        assert cell in mi210
    assert bare.split()[:3] == ["rocm", "1", "PCI"] and bare.split()[-11:] == ["-"] * 11
    assert "0 C" not in bare and "0 W" not in bare


def test_device_and_index_selection_and_usage_errors(sysfs, capsys):
    assert main(["gpu", "--device", "rocm", "--index", "1", "--json"]) == 0
    assert [r["index"] for r in json.loads(capsys.readouterr().out)] == [1]
    assert main(["gpu", "--device", "cpu"]) == 2
    assert "no GPU telemetry for 'cpu'; choose from cuda, gpu, rocm or all" in capsys.readouterr().err
    assert main(["gpu", "--device", "rocm", "--index", "5"]) == 1
    assert "ThermalUnavailableError: rocm: no GPU index 5; the driver reports 2 GPU(s)" in capsys.readouterr().err
    for bad in (["--index", "-1"], ["--count", "0"], ["--interval", "x"], ["--fan", "101"], ["--power-cap", "0"],
                ["--lock-clocks", "a-b"]):
        with pytest.raises(SystemExit) as e:
            main(["gpu", *bad])
        assert e.value.code == 2


def test_watch_with_count_is_bounded(sysfs, capsys):
    t0 = time.perf_counter()
    assert main(["gpu", "--watch", "--count", "3", "--interval", "20", "--json", "--device", "rocm"]) == 0
    assert time.perf_counter() - t0 < 5
    samples = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(samples) == 3 and all(len(s) == 2 for s in samples)
    assert main(["gpu", "--watch", "--count", "2", "--interval", "1", "--device", "gpu"]) == 0
    assert capsys.readouterr().out.count("DEV  IDX") == 2  # plain frames when stdout is not a terminal


def test_live_table_through_rich(sysfs):
    rich_console = pytest.importorskip("rich.console")
    from rich.live import Live
    from rlx_core.hw import all_gpu_thermal
    buf = io.StringIO()
    live = Live(console=rich_console.Console(file=buf, force_terminal=True, width=200), auto_refresh=False)
    assert watch(all_gpu_thermal, 2, 0.001, render=None, live=live) == 2
    text = buf.getvalue()
    assert "rlx gpu" in text and "MI210" in text and "HOTSPOT" in text
    assert rich_table(all_gpu_thermal()).row_count == 3 and len(table_rows(all_gpu_thermal())[0]) == len(HEADER)


def test_control_sets_validates_and_exits_1_on_any_failure(sysfs, capsys):
    assert main(["gpu", "--device", "rocm", "--index", "0", "--power-cap", "250", "--fan", "50%"]) == 0
    out = capsys.readouterr().out
    assert "rocm:0 power cap: allowed 0-300 W" in out and "rocm:0 power cap 250 W: done" in out
    assert (sysfs / "power1_cap").read_text() == "250000000\n" and (sysfs / "pwm1").read_text() == "128\n"
    assert main(["gpu", "--device", "rocm", "--index", "0", "--power-cap", "500"]) == 1
    err = capsys.readouterr().err
    assert "rocm:0 power cap 500 W: ThermalRangeError: rocm:0 power cap (W) 500 is outside the allowed range" in err
    assert (sysfs / "power1_cap").read_text() == "250000000\n"  # unchanged
    assert main(["gpu", "--device", "rocm", "--lock-clocks", "1000-1500", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(r["gpu"], r["ok"], r["error"]) for r in report["control"]] == [
        ("rocm:0", False, "ThermalUnsupportedError"), ("rocm:1", False, "ThermalUnsupportedError")]
    assert len(report["gpus"]) == 2


def test_no_gpus_prints_why_and_succeeds_but_control_fails(tmp_path, capsys):
    saved = telemetry_providers()
    try:
        for label in ("cuda", "rocm", "gpu"):
            register_telemetry_provider(SysfsProvider(label, tmp_path))
        assert main(["gpu"]) == 0
        out = capsys.readouterr().out
        assert "no GPU found to read" in out and "rocm: no rocm card under" in out
        assert main(["gpu", "--reset-fan"]) == 1
        assert "ThermalUnavailableError: no GPU found to read" in capsys.readouterr().err
    finally:
        for label in ("cuda", "rocm", "gpu"):
            unregister_telemetry_provider(label)
        for label, provider in saved.items():
            if telemetry_providers().get(label) is not provider:
                register_telemetry_provider(provider)

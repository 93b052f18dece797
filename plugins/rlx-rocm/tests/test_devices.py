"""The rocm device: the cheap and full probes, the stand-in marking, what `rlx devices`
shows, and device selection never preferring a software stand-in to cpu."""
import subprocess
import sys

import numpy as np
import pytest

from rlx_core import Graph, Session
from rlx_core.runtime import registry
from rlx_rocm import plugin


@pytest.mark.no_platform
def test_plugin_module_is_cheap_and_declares_rocm():
    code = "import sys, rlx_rocm.plugin as p; print(len(p.rlx_backends()), 'pyopencl' in sys.modules, p.RLX_PLUGIN_API)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "False", "1"]
    assert plugin.rlx_backends()[0].device.label == "rocm"


@pytest.mark.no_platform
def test_without_an_amd_driver_the_cheap_probe_says_how_to_get_a_stand_in(monkeypatch):
    if plugin.amd_icds():
        pytest.skip(f"an AMD OpenCL driver is registered here: {plugin.amd_icds()}")
    monkeypatch.delenv("RLX_ROCM_OPENCL_PLATFORM")
    avail = plugin._probe()
    assert not avail.ok and "RLX_ROCM_OPENCL_PLATFORM" in avail.reason and "AMD" in avail.reason


def test_without_an_amd_gpu_the_full_probe_lists_the_platforms(monkeypatch):
    from rlx_rocm.opencl import select
    from rlx_core.errors import DeviceUnavailableError
    if plugin.amd_icds():
        pytest.skip("an AMD OpenCL driver is registered here")
    monkeypatch.delenv("RLX_ROCM_OPENCL_PLATFORM")
    with pytest.raises(DeviceUnavailableError, match="no AMD GPU among the OpenCL platforms here"):
        select()
    avail = registry().entry("rocm").get().is_available()  # the full probe (the cheap one stops earlier)
    assert not avail.ok and "Portable Computing Language" in avail.reason


def test_a_platform_filter_matching_nothing_is_unavailable(monkeypatch):
    monkeypatch.setenv("RLX_ROCM_OPENCL_PLATFORM", "no such platform 1234")
    avail = registry().entry("rocm").availability()
    assert not avail.ok and "matches no OpenCL platform" in avail.reason


def test_stand_in_is_reported_with_device_facts():
    avail = registry().entry("rocm").availability()
    assert avail.ok, avail.reason
    d = avail.detail
    for key in ("device", "platform", "compute_units", "global_mem_bytes", "opencl_version", "driver"):
        assert d[key], key
    assert isinstance(d["fp16"], bool) and isinstance(d["fp64"], bool)
    assert d["stand_in"] is True and "a stand-in, not an AMD GPU" in avail.reason
    assert d["software"] is ("CPU" in d["device_type"])
    if d["software"]:
        assert "[software: OpenCL on the host CPU]" in avail.reason


def test_rlx_devices_shows_the_stand_in(capsys):
    from rlx_core.cli import main
    main(["devices", "--probe", "full"])
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("rocm"))
    assert "stand-in" in out and "rocm" in line


def test_software_stand_in_is_never_picked_over_cpu():
    from rlx_core.select import DevicePolicy, device_report, fastest_device_for
    if not registry().entry("rocm").availability().detail.get("software"):
        pytest.skip("the OpenCL device here is not a CPU")
    g = Graph("mm")
    x = g.input("x", (256, 256))
    g.set_outputs([g.matmul(g.matmul(x, x), x)])
    rows = {r.label: r for r in device_report(g, DevicePolicy.only(["cpu", "rocm"]))}
    assert rows["rocm"].software is True and rows["cpu"].recommended
    assert fastest_device_for(g, DevicePolicy.only(["cpu", "rocm"]), calibrate=False) == "cpu"


def test_every_claimed_dtype_table_is_well_formed():
    from rlx_core.ir import DType
    table = registry().backend("rocm").supported_ops()
    assert all(v is None or all(isinstance(d, DType) for d in v) for v in table.values())
    assert DType.F16 in table["matmul"] and DType.I8 in table["add"]


def test_a_graph_runs():
    g = Graph("tiny")
    x = g.input("x", (3,))
    g.set_outputs([g.relu(x) * 2.0])
    out = Session("rocm").compile(g).run({"x": np.array([-1, 0.5, 2], np.float32)})[0]
    np.testing.assert_array_equal(out, [0, 1, 4])


def test_measured_figures_also_rank_the_stand_in_after_cpu(tmp_path, monkeypatch):
    """With rocm calibrated on this device (the core's calibration through the plugin's
    hook), the cost model's estimate for a matmul-heavy graph is still cpu's to win."""
    from rlx_core.select import DevicePolicy, device_report, fastest_device_for
    from rlx_core.select.calibration import calibrate, clear_memo
    from rlx_rocm.opencl import open_device
    if not registry().entry("rocm").availability().detail.get("software"):
        pytest.skip("the OpenCL device here is not a CPU")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    dev = open_device()
    saved = dev.tuning
    clear_memo()
    try:
        calib = calibrate("rocm")
        assert calib.software is True and calib.sgemm_gflops > 0
        g = Graph("mm-heavy")
        x = g.input("x", (512, 512))
        g.set_outputs([g.matmul(g.matmul(x, x), x)])
        rows = {r.label: r for r in device_report(g, DevicePolicy.only(["cpu", "rocm"]))}
        assert rows["cpu"].recommended and rows["rocm"].figures.startswith("calibrated")
        assert rows["rocm"].estimate_ns > rows["cpu"].estimate_ns  # the figures alone rank it after cpu
        assert fastest_device_for(g, DevicePolicy.only(["cpu", "rocm"]), calibrate=False) == "cpu"
    finally:
        dev.tuning = saved
        clear_memo()

"""The five device profiles, their probes and what device_report / `rlx devices` shows."""
import subprocess
import sys

import numpy as np
import pytest

from rlx_core import Graph, Session
from rlx_core.errors import DeviceUnavailableError, UnsupportedOpError
from rlx_core.runtime import registry
from rlx_wgpu import plugin
from rlx_wgpu.gpu import PROFILES, SPEC_DEFAULT_LIMITS, adapter_rank, find_adapter, is_software, open_gpu

pytest.importorskip("wgpu")


def _backend(label):
    return registry().backend(label)


@pytest.mark.no_adapter
def test_plugin_module_is_cheap_and_declares_five_devices():
    code = "import sys, rlx_wgpu.plugin as p; print(len(p.rlx_backends()), 'wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["5", "False"]
    assert {f.device.label for f in plugin.rlx_backends()} == {"gpu", "vulkan", "opengl", "directx", "webgpu"}


@pytest.mark.no_adapter
def test_adapter_rank_prefers_discrete_then_vulkan():
    infos = [{"adapter_type": t, "backend_type": b} for t, b in
             [("CPU", "Vulkan"), ("DiscreteGPU", "OpenGL"), ("DiscreteGPU", "Vulkan"), ("IntegratedGPU", "Vulkan")]]
    ranked = sorted(infos, key=adapter_rank)
    assert ranked[0] == {"adapter_type": "DiscreteGPU", "backend_type": "Vulkan"}
    assert ranked[-1]["adapter_type"] == "CPU"


@pytest.mark.no_adapter
def test_software_adapters_are_recognised():
    assert is_software({"adapter_type": "CPU", "device": "llvmpipe (LLVM 15.0.6, 256 bits)"})
    assert is_software({"adapter_type": "Unknown", "device": "SwiftShader Device (Subzero)"})
    assert is_software({"device": "Microsoft Basic Render Driver", "adapter_type": "Unknown"})
    assert not is_software({"adapter_type": "DiscreteGPU", "device": "NVIDIA H200", "description": "560.35"})
    assert not is_software({"adapter_type": "IntegratedGPU", "device": "Apple M2"})


def test_software_adapter_is_reported_and_never_picked_over_cpu():
    """The flag the core's selection reads, the marker `rlx devices` shows, and the pick."""
    from rlx_core.select import DevicePolicy, device_report, fastest_device_for
    gpu = open_gpu("gpu")
    avail = registry().entry("gpu").availability()
    assert avail.detail["software"] is is_software(gpu.info)
    if not is_software(gpu.info):
        pytest.skip(f"the adapter here is hardware: {gpu.info['device']}")
    assert "[software adapter: runs on the host CPU]" in avail.reason
    g = Graph("mm")
    x = g.input("x", (64, 64))
    g.set_outputs([g.matmul(x, x)])
    rows = {r.label: r for r in device_report(g, DevicePolicy.only(["cpu", "gpu"]))}
    assert rows["gpu"].software is True and rows["cpu"].recommended
    assert fastest_device_for(g, DevicePolicy.only(["cpu", "gpu"]), calibrate=False) == "cpu"


def test_availability_reports_adapter_driver_and_backend_type():
    avail = registry().entry("gpu").availability()
    assert avail.ok, avail.reason
    for key in ("adapter", "driver", "backend_type", "adapter_type"):
        assert avail.detail[key], key
    assert avail.detail["backend_type"] in avail.reason


def test_forced_backend_types_use_only_that_backend():
    for label, backend_type in (("vulkan", "Vulkan"), ("opengl", "OpenGL")):
        entry = registry().entry(label)
        if not entry.availability().ok:
            pytest.skip(f"no {backend_type} adapter here: {entry.availability().reason}")
        assert _backend(label).gpu.info["backend_type"] == backend_type


@pytest.mark.no_adapter
def test_directx_is_unavailable_off_windows_with_a_reason():
    if sys.platform == "win32":
        pytest.skip("DirectX 12 may exist here")
    avail = registry().entry("directx").availability()
    assert not avail.ok and "Windows" in avail.reason


def test_missing_backend_type_names_the_adapters_seen():
    with pytest.raises(DeviceUnavailableError, match="no wgpu adapter of backend type Metal"):
        find_adapter(type(PROFILES["vulkan"])("metal-test", "Metal"))


def test_adapter_name_filter(monkeypatch):
    monkeypatch.setenv("RLX_WGPU_ADAPTER", "no such adapter 1234")
    with pytest.raises(DeviceUnavailableError, match="RLX_WGPU_ADAPTER"):
        find_adapter(PROFILES["gpu"])


def test_webgpu_profile_has_spec_default_limits_and_no_optional_features():
    gpu = open_gpu("webgpu")
    for name in ("max-storage-buffers-per-shader-stage", "max-compute-workgroup-storage-size",
                 "max-storage-buffer-binding-size", "min-storage-buffer-offset-alignment"):
        assert gpu.limits[name] == SPEC_DEFAULT_LIMITS[name], name
    assert not gpu.f16 and "shader-f16" not in gpu.features


def test_f16_is_rejected_by_legalize_without_shader_f16():
    g = Graph("half")
    x = g.input("x", (4,), "f16")
    g.set_outputs([g.exp(x)])
    with pytest.raises(UnsupportedOpError, match="exp on f16"):
        Session("webgpu").compile(g)


def test_rlx_devices_lists_the_wgpu_devices(capsys):
    from rlx_core.cli import main
    main(["devices", "--probe", "full"])
    out = capsys.readouterr().out
    for label in ("gpu", "vulkan", "opengl", "directx", "webgpu"):
        assert f"{label} " in out
    assert open_gpu("gpu").info["device"] in out


def test_every_profile_runs_a_graph():
    g = Graph("tiny")
    x = g.input("x", (3,))
    g.set_outputs([g.relu(x) * 2.0])
    for label in ("gpu", "vulkan", "opengl", "webgpu"):
        if registry().entry(label).availability().ok:
            out = Session(label).compile(g).run({"x": np.array([-1, 0.5, 2], np.float32)})[0]
            np.testing.assert_array_equal(out, [0, 1, 4])

"""Viability, device_report, fastest_device_for, resolve_device and the manifest."""
import json
import subprocess
import sys

import pytest

from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.runtime import Device
from rlx_core.runtime.registry import install_hint, register_backends
from rlx_core.select import (BackendsManifest, DevicePolicy, available_devices, backends_manifest, blocker_for,
                             device_report, devices_for, fastest_device_for, is_available, resolve_device)

CPU, GPU = Device("cpu"), Device("gpu")


def rows_by_label(rows):
    return {r.label: r for r in rows}


def test_availability(fakes):
    assert is_available("cpu") and is_available("gpu")
    assert not is_available("cuda") and not is_available("tpu")
    assert available_devices() == [Device("rocm"), Device("metal"), GPU, CPU]


def test_blockers_in_order_with_fixes(fakes, helpers):
    g = helpers.tanh_graph()
    assert blocker_for(g, "tpu").kind == "unregistered"
    assert blocker_for(g, "tpu").fix == install_hint("tpu")  # pip command, or why rlx-tpu is not loaded
    cuda = blocker_for(g, "cuda")
    assert cuda.kind == "unavailable" and "no NVIDIA driver" in cuda.reason and "RLX_DENY_DEVICES" in cuda.fix
    metal = blocker_for(g, "metal")
    assert metal.kind == "unsupported" and "%3 tanh" in metal.reason and "RLX_DEVICE_CHAIN" in metal.fix
    assert blocker_for(helpers.add_graph(), "metal") is None
    denied = blocker_for(g, "gpu", DevicePolicy.all().with_deny(["gpu"]))
    assert denied.kind == "policy" and "RLX_DENY_DEVICES" in denied.fix
    assert blocker_for(g, "gpu") is None and blocker_for(None, "metal") is None


def test_devices_for_follows_policy_order(fakes, helpers):
    g = helpers.tanh_graph()
    assert devices_for(g) == [Device("rocm"), GPU, CPU]  # platform priority; metal cannot run tanh
    assert devices_for(g, DevicePolicy.only(["cpu", "gpu"]).with_prefer(["cpu"])) == [CPU, GPU]
    assert devices_for(helpers.add_graph(), DevicePolicy.only(["metal", "cpu"])) == [Device("metal"), CPU]


def test_devices_for_reads_the_environment_by_default(fakes, helpers, monkeypatch):
    monkeypatch.setenv("RLX_DENY_DEVICES", "rocm,gpu")
    assert devices_for(helpers.tanh_graph()) == [CPU]


def test_device_report_rows(fakes, helpers):
    g = helpers.tanh_graph()
    helpers.write_calibration("cpu", "cpu", roundtrip=1000.0, dispatch=1000.0)
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=50_000.0)
    rows = device_report(g, DevicePolicy.all().with_deny(["rocm"]))
    by = rows_by_label(rows)
    assert [r.label for r in rows][:2] == ["cpu", "gpu"]  # viable, fastest first
    assert by["cpu"].recommended and not by["gpu"].recommended
    assert sum(r.recommended for r in rows) == 1
    assert by["cpu"].figures == "calibrated" and by["cpu"].estimate_ns < by["gpu"].estimate_ns
    assert "clone" in by["cpu"].capabilities and by["cpu"].backend == "cpu"
    assert by["cuda"].registered and not by["cuda"].available and by["cuda"].supports_graph is None
    assert by["rocm"].blocker_kind == "policy" and by["rocm"].supports_graph is True
    assert by["metal"].supports_graph is False and by["metal"].offending[0][0] == "%3 tanh"
    assert not by["tpu"].registered and by["tpu"].blocker == "no installed plugin serves it"
    assert {r.label for r in rows} >= {"cpu", "cuda", "rocm", "tpu", "metal", "mlx", "gpu", "vulkan"}


def test_device_report_without_a_graph(fakes):
    by = rows_by_label(device_report())
    assert by["cpu"].supports_graph is None and by["cpu"].blocker is None and by["cpu"].estimate_ns is None
    assert not any(r.recommended for r in by.values())


def test_fastest_device_for_uses_calibrated_costs(fakes, helpers):
    g = helpers.tanh_graph()
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0, dispatch=10.0)
    helpers.write_calibration("cpu", "cpu", roundtrip=20_000.0)
    helpers.write_calibration("rocm", "fake-rocm", roundtrip=40_000.0)
    assert fastest_device_for(g) == GPU
    assert fastest_device_for(g, DevicePolicy.only(["cpu", "rocm"])) == CPU
    assert fastest_device_for(g, DevicePolicy.only(["cpu"])) == CPU


def test_fastest_device_for_calibrates_candidates_once(fakes, helpers, monkeypatch):
    from rlx_core.select import calibration as cal
    measured = []
    monkeypatch.setattr(cal, "measure_backend", lambda backend, device=None, **kw: measured.append(backend.name) or {
        "sgemm_gflops": 1.0, "memory_bw_gbps": 1.0, "roundtrip_overhead_ns": 1.0, "dispatch_overhead_ns": 1.0,
        "vector_gflops": 1.0})
    helpers.write_calibration("cpu", "cpu")
    policy = DevicePolicy.only(["cpu", "gpu"])
    fastest_device_for(helpers.tanh_graph(), policy)
    fastest_device_for(helpers.tanh_graph(), policy)
    assert measured == ["fake-gpu"]
    fastest_device_for(helpers.tanh_graph(), DevicePolicy.only(["rocm"]))  # one candidate: nothing to rank
    assert measured == ["fake-gpu"]


def test_nothing_viable_lists_every_blocker(fakes, helpers):
    with pytest.raises(DeviceUnavailableError) as e:
        fastest_device_for(helpers.tanh_graph(), DevicePolicy.only(["cuda", "metal"]))
    text = str(e.value)
    assert "no device can run graph 'tanh-block'" in text
    assert "cuda: not available: no NVIDIA driver" in text and "metal: unsupported" in text
    assert "cpu: not in the DevicePolicy allow-list" in text


def test_resolve_hint_then_env_then_cost_model(fakes, helpers, monkeypatch):
    g = helpers.tanh_graph()
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0)
    for dev, name in (("cpu", "cpu"), ("rocm", "fake-rocm")):
        helpers.write_calibration(dev, name, roundtrip=90_000.0)
    assert resolve_device(g) == GPU
    monkeypatch.setenv("RLX_DEVICE", "host")
    assert resolve_device(g) == CPU
    assert resolve_device(g, "rocm") == Device("rocm")


def test_resolve_rejects_hints_that_cannot_run(fakes, helpers, monkeypatch):
    g = helpers.tanh_graph()
    with pytest.raises(DeviceUnavailableError, match=r"requested device 'cuda'.*no NVIDIA driver"):
        resolve_device(g, "cuda")
    with pytest.raises(PolicyError, match=r"requested device 'gpu'.*denied.*RLX_DENY_DEVICES"):
        resolve_device(g, "gpu", DevicePolicy.all().with_deny(["gpu"]))
    monkeypatch.setenv("RLX_DEVICE", "metal")
    with pytest.raises(DeviceUnavailableError, match=r"RLX_DEVICE=metal: device 'metal' cannot be used: "
                                                     r"unsupported.*tanh"):
        resolve_device(g)


def test_resolve_with_a_prefixed_policy_reads_its_hint(fakes, helpers, monkeypatch):
    monkeypatch.setenv("RLX_DEVICE", "gpu")
    monkeypatch.setenv("MYAPP_DEVICE", "cpu")
    assert resolve_device(helpers.tanh_graph(), policy=DevicePolicy.from_env_key("MYAPP")) == CPU


def test_manifest_lists_plugins_versions_and_devices(fakes):
    manifest = BackendsManifest.current()
    assert {"cpu", "gpu", "cuda", "rocm", "metal"} <= set(manifest.devices)
    cpu = next(p for p in manifest.plugins if p.name == "cpu")
    assert cpu.distribution == "rlx-cpu" and cpu.version and cpu.status == "loaded"
    assert [b.device for b in cpu.backends] == ["cpu"]
    data = json.loads(backends_manifest())
    assert data["core"]["name"] == "rlx-core" and "cpu" in data["devices"]
    assert any(p["name"] == "FakePlugin" and p["origin"] == "register_backends" for p in data["plugins"])


class Exploding:
    from rlx_core.runtime import hookimpl

    @hookimpl
    def rlx_backends(self):
        raise ImportError("libexotic.so: cannot open shared object file")


def test_manifest_and_report_show_a_failed_plugin(fakes):
    register_backends(Exploding())
    failed = [p for p in BackendsManifest.current().plugins if p.status == "failed"]
    assert failed and "libexotic.so" in failed[0].error
    assert rows_by_label(device_report())["cpu"].available  # the others are unaffected


def test_report_imports_no_backend_library():
    """In a fresh process (nothing calibrated) the manifest and report load no heavy
    library (how long they take is a benchmark figure, not a test)."""
    code = ("import json, sys; import rlx_core; from rlx_core.select import device_report, BackendsManifest; "
            "BackendsManifest.current(); device_report(); "
            "print(json.dumps([m for m in ('numba', 'torch', 'jax', 'scipy', 'onnxruntime', 'matplotlib') "
            "if m in sys.modules]))")
    heavy = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout)
    assert heavy == []


def test_a_missing_library_is_fixed_by_the_install_command(fresh_registry):
    """A plugin whose Python library is absent (rlx-cuda without CuPy) is fixed by the exact
    install command, not by "fix the driver"."""
    from rlx_core.runtime import BackendFactory, hookimpl

    class Plugin:
        @hookimpl
        def rlx_backends(self):
            return [BackendFactory(name="cuda", device="cuda", create=lambda: None,
                                   requires=("rlx_no_such_module_xyz",))]

    register_backends(Plugin())
    blocker = blocker_for(None, "cuda")
    assert blocker.kind == "unavailable" and "missing Python package(s): rlx_no_such_module_xyz" in blocker.reason
    assert blocker.fix == f"{install_hint('cuda')}, or exclude the device with RLX_DENY_DEVICES=cuda"

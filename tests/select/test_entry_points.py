"""Every entry point that picks a device makes the same pick: ``rlx run``, ``rlx bench``,
``fastest_device_for``, ``resolve_device``, ``GraphDevices``, ``FlexibleSession``,
``DeviceRouter`` and ``Session()`` without a device, under the same ``RLX_*`` policy
variables and the same cost model, with software adapters ranked after the others
unless measured faster on the graph.

The devices: the real rlx-cpu plugin, a fake ``cuda`` (hardware) and a fake ``gpu``
that reports itself as a software adapter (lavapipe's availability detail). Written
calibrations make the cost model rate gpu fastest, then cuda, then cpu, so every
decision below is the policy's, the cost model's or the software rule's -- never timing.
"""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from rlx_core.runtime import Availability, BackendFactory, Device, hookimpl
from rlx_core.runtime.registry import register_backends
from rlx_core.select import (DevicePolicy, DeviceRouter, FlexibleSession, GraphDevices, device_report,
                             fastest_device_for, resolve_device)
from rlx_core.select.calibration import record_graph_timings
from rlx_core.select.devices import pick_device, software_detail

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

CPU, CUDA, GPU = Device("cpu"), Device("cuda"), Device("gpu")
LAVAPIPE = {"adapter": "llvmpipe (LLVM 15.0.6, 256 bits)", "driver": "Mesa 22.3.6", "backend_type": "Vulkan",
            "adapter_type": "CPU", "software": True}


class DetailPlugin:
    """Fake backends whose probes (cheap and full) carry an availability detail."""

    def __init__(self, *pairs):
        self.pairs = pairs  # (backend, detail)

    @hookimpl
    def rlx_backends(self):
        return [BackendFactory(name=b.name, device=b.device, create=lambda b=b: b, priority=10,
                               probe=lambda d=d: Availability(True, "fake", d)) for b, d in self.pairs]


@pytest.fixture
def world(helpers, tmp_path):
    """cpu + fake cuda + fake software gpu; an MLP as an ONNX file and as the imported graph."""
    from rlx_core.frontends.onnx import load_onnx_for
    gpu, cuda = helpers.RefBackend("fake-lavapipe", "gpu"), helpers.RefBackend("fake-cuda", "cuda")
    gpu.is_available = lambda: Availability(True, "llvmpipe (Vulkan)", LAVAPIPE)
    register_backends(DetailPlugin((gpu, LAVAPIPE), (cuda, {"adapter": "Fake H200", "adapter_type": "DiscreteGPU"})))
    for dev, name, roundtrip in (("gpu", "fake-lavapipe", 100.0), ("cuda", "fake-cuda", 1_000.0),
                                 ("cpu", "cpu", 20_000.0)):
        helpers.write_calibration(dev, name, roundtrip=roundtrip, dispatch=10.0)
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    path = tmp_path / "mlp.onnx"
    onnx.save_model(proto, str(path))
    inputs = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    model = load_onnx_for(proto, inputs)
    json_path = tmp_path / "mlp.json"
    json_path.write_text(model.graph.to_json())
    return SimpleNamespace(path=path, json_path=json_path, graph=model.graph, params=model.params, inputs=inputs)


def _rlx(capsys, *argv):
    from rlx_core.cli import main
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _by_rlx_run(w, capsys):
    out = _rlx(capsys, "run", str(w.path), "--repeat", "1")
    return Device(re.search(r"^device  (\S+) \(", out, re.M).group(1))


def _by_rlx_bench(w, capsys):
    out = _rlx(capsys, "bench", "--graph", str(w.json_path), "--runs", "1")
    return Device(re.search(r"^pick: (\S+) \(", out, re.M).group(1))


def _by_graph_devices(w, capsys):
    runner = GraphDevices(w.graph)
    runner.set_params(w.params)
    runner.run_resolved(w.inputs)
    return runner.last_run.device


def _by_router(w, capsys):
    router = DeviceRouter(w.graph, params=w.params, rebench_on_throttle=False)
    return router.run(w.inputs)[0]


ENTRY_POINTS = {
    "rlx run": _by_rlx_run,
    "rlx bench": _by_rlx_bench,
    "fastest_device_for": lambda w, capsys: fastest_device_for(w.graph),
    "resolve_device": lambda w, capsys: resolve_device(w.graph),
    "GraphDevices": _by_graph_devices,
    "FlexibleSession": lambda w, capsys: FlexibleSession().compile_resolved(w.graph).device,
    "DeviceRouter": _by_router,
    "Session()": lambda w, capsys: __import__("rlx_core").Session().compile(w.graph).device,
}

# (environment, measured run times recorded for the graph, expected pick)
SCENARIOS = {
    "cost model: the fastest hardware device": ({}, {}, CUDA),
    "software gpu rated fastest, yet cpu": ({"RLX_DENY_DEVICES": "cuda"}, {}, CPU),
    "allow-list": ({"RLX_DEVICES": "cpu,gpu"}, {}, CPU),
    "allow-list of the software device alone": ({"RLX_DEVICES": "gpu"}, {}, GPU),
    "RLX_DEVICE": ({"RLX_DEVICE": "gpu"}, {}, GPU),
    "the issue's RLX_DEVICES=cpu RLX_DEVICE=cpu": ({"RLX_DEVICES": "cpu", "RLX_DEVICE": "cpu"}, {}, CPU),
    "measured faster, the software device wins": ({"RLX_DENY_DEVICES": "cuda"}, {"cpu": 2e6, "gpu": 1e6}, GPU),
    "measurements beat the cost model": ({"RLX_DEVICES": "cpu,cuda"}, {"cpu": 1e6, "cuda": 3e6}, CPU),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_makes_the_same_pick(entry, scenario, world, monkeypatch, capsys):
    env, measured, expected = SCENARIOS[scenario]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if measured:
        record_graph_timings(world.graph, measured)
    if entry == "fastest_device_for" and "RLX_DEVICE" in env:
        # fastest_device_for answers "which is fastest" (the seed's cost-model query): a
        # hint, RLX_DEVICE included, is for the entry points that resolve a run.
        expected = fastest_device_for(world.graph, DevicePolicy.from_env())
        assert expected == (CPU if env.get("RLX_DEVICES") == "cpu" else CUDA)
    assert ENTRY_POINTS[entry](world, capsys) == expected


def test_the_pick_says_why(world, monkeypatch):
    monkeypatch.setenv("RLX_DENY_DEVICES", "cuda")
    pick = pick_device(world.graph)
    assert pick.device == CPU and pick.how == "cost model"
    assert pick.software == (GPU,) and pick.demoted == (GPU,)
    assert "gpu" in pick.reason and "(software device)" in pick.reason
    assert "picked only when measured faster" in pick.reason and "RLX_BENCHMARK_PICK" in pick.reason
    assert [d for d, _ in pick.ranked] == [CPU, GPU] and pick.ranked[1][1] < pick.ranked[0][1]  # estimates kept


def test_a_benchmark_pick_measures_the_software_device_once(world, monkeypatch):
    """The measure callable stands in for GraphDevices.benchmark: what it says decides."""
    calls = []

    def measure(devices):
        calls.append(sorted(map(str, devices)))
        return {CPU: 3e6, GPU: 1e6}

    policy = DevicePolicy.only(["cpu", "gpu"]).with_benchmark_pick(2)
    first = pick_device(world.graph, policy=policy, measure=measure)
    assert first.device == GPU and first.how == "benchmark" and "benchmarked just now (2 runs each)" in first.reason
    again = pick_device(world.graph, policy=policy, measure=measure)
    assert again.device == GPU and again.how == "measured" and calls == [["cpu", "gpu"]]  # cached per graph


def test_software_devices_are_not_calibrated_for_a_pick_they_cannot_win(world, helpers, monkeypatch):
    from rlx_core.select import calibration as cal
    measured = []
    monkeypatch.setattr(cal, "measure_backend", lambda backend, device=None, **kw: measured.append(backend.name) or {
        "sgemm_gflops": 1.0, "memory_bw_gbps": 1.0, "roundtrip_overhead_ns": 1.0, "dispatch_overhead_ns": 1.0,
        "vector_gflops": 1.0})
    cal.calibration_path("fake-lavapipe", "gpu").unlink()
    assert fastest_device_for(world.graph, DevicePolicy.only(["cpu", "gpu"])) == CPU and measured == []
    assert fastest_device_for(world.graph, DevicePolicy.only(["gpu"])) == GPU and measured == []
    # Uncalibrated, a software device's estimate uses software figures, not a GPU's.
    report = {r.label: r for r in device_report(world.graph, DevicePolicy.only(["cpu", "gpu"]))}
    assert report["gpu"].figures == "nominal" and report["gpu"].estimate_ns > report["cpu"].estimate_ns


def test_device_report_marks_software_devices(world):
    rows = {r.label: r for r in device_report(world.graph, DevicePolicy.all().with_deny(["cuda"]))}
    assert rows["gpu"].software is True and "software" in rows["gpu"].detail
    assert rows["cpu"].software is False and rows["cuda"].software is False
    assert rows["cpu"].recommended and not rows["gpu"].recommended  # the report ranks as the pick does
    assert [label for label, r in rows.items() if r.estimate_ns is not None] == ["cpu", "gpu"]


@pytest.mark.parametrize("detail, expected", [
    ({"software": True}, True), ({"software": False, "adapter_type": "CPU"}, False),
    ({"adapter_type": "CPU", "adapter": "llvmpipe"}, True), ({"adapter": "SwiftShader Device (Subzero)"}, True),
    ({"adapter": "Microsoft Basic Render Driver", "adapter_type": "Unknown"}, True),
    ({"adapter": "lavapipe"}, True), ({"adapter": "NVIDIA H200", "adapter_type": "DiscreteGPU"}, False),
    ({"adapter": "Warpspeed 9000"}, False), ({}, None), ({"platform": "x86_64"}, None),
])
def test_software_detail(detail, expected):
    assert software_detail(detail) is expected

"""DeviceRouter (warm-all, runs from many threads, throttle-aware re-warm) and FlexibleSession."""
import threading

import numpy as np
import pytest

from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.hw import ThermalState
from rlx_core.runtime import Device
from rlx_core.select import DevicePolicy, DeviceRouter, FlexibleSession

CPU, GPU = Device("cpu"), Device("gpu")
W = np.linspace(-1, 1, 64, dtype=np.float32)


class Thermometer:
    """A thermal reader the test switches between nominal and throttled."""

    def __init__(self):
        self.state = ThermalState("nominal")
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.state


@pytest.fixture
def router(fakes, helpers):
    """On paper rocm is fastest, then gpu, then cpu; rocm fails whenever it runs."""
    for dev, name, roundtrip in (("rocm", "fake-rocm", 10.0), ("gpu", "fake-gpu", 100.0), ("cpu", "cpu", 9e4)):
        helpers.write_calibration(dev, name, roundtrip=roundtrip)
    return DeviceRouter(helpers.tanh_graph(64), DevicePolicy.only(["cpu", "gpu", "rocm"]), params={"w": W},
                        rebench_on_throttle=False)


def test_router_warms_every_viable_device_on_construction(router):
    assert set(router.runner.compiled_devices()) == {CPU, GPU, Device("rocm")}
    assert router.devices() == [Device("rocm"), GPU, CPU]


def test_run_run_on_and_run_chain(router, helpers):
    x = np.linspace(0, 1, 64, dtype=np.float32)
    want = helpers.expected_tanh(x, W)
    device, out = router.run({"x": x}, hint="gpu")
    assert device == GPU
    np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(router.run_on("cpu", {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    device, out = router.run_chain({"x": x})  # rocm fails at run time: the chain moves on
    assert device == GPU and router.runner.last_run.attempts[0][0] == "rocm"
    np.testing.assert_allclose(out[0], want, rtol=1e-4, atol=1e-5)


def test_params_set_later_reach_every_warm_device(router, helpers):
    x = np.ones(64, np.float32)
    router.set_param("w", W * 3)
    router.set_param_typed("w", (W * 3).tobytes(), "f32")
    for dev in ("cpu", "gpu"):
        np.testing.assert_allclose(router.run_on(dev, {"x": x})[0], helpers.expected_tanh(x, W * 3), rtol=1e-4, atol=1e-5)


def test_concurrent_runs_from_8_threads_are_correct(fakes, helpers):
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0)
    helpers.write_calibration("cpu", "cpu", roundtrip=9e4)
    fakes.gpu.delay_s = 0.0005  # runs overlap; the fake's staging buffer would mix unserialized runs
    router = DeviceRouter(helpers.tanh_graph(64), DevicePolicy.only(["cpu", "gpu"]), params={"w": W},
                          throttle_check_s=0.0, thermal=Thermometer())
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(64).astype(np.float32) for _ in range(8)]
    errors, mismatches = [], []

    def worker(i):
        try:
            for step in range(25):
                x = inputs[(i + step) % 8]
                if step % 3 == 0:
                    _, out = router.run_chain({"x": x}, hint=("cpu", "gpu", None)[i % 3])
                elif step % 3 == 1:
                    out = router.run_on(("gpu", "cpu")[i % 2], {"x": x})
                else:
                    _, out = router.run({"x": x})
                if not np.allclose(out[0], helpers.expected_tanh(x, W), rtol=1e-4, atol=1e-5):
                    mismatches.append((i, step))
        except Exception as e:  # surfaced below with the thread's context
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and mismatches == []
    assert sum(router.runner.served.values()) == 8 * 25


def test_rewarm_on_thermal_state_changes_only(fakes, helpers):
    thermo = Thermometer()
    router = DeviceRouter(helpers.tanh_graph(64), DevicePolicy.only(["cpu", "gpu"]), params={"w": W},
                          throttle_check_s=0.0, thermal=thermo)
    x = np.ones(64, np.float32)
    compiles = fakes.gpu.compiles
    router.run({"x": x}, hint="gpu")
    assert router.rewarms == 0 and fakes.gpu.compiles == compiles
    thermo.state = ThermalState("throttled", "test")
    router.run({"x": x}, hint="gpu")
    router.run({"x": x}, hint="gpu")  # still throttled: no second re-warm
    assert router.rewarms == 1 and fakes.gpu.compiles == compiles + 1
    thermo.state = ThermalState("nominal")
    _, out = router.run({"x": x}, hint="gpu")
    assert router.rewarms == 2
    np.testing.assert_allclose(out[0], helpers.expected_tanh(x, W), rtol=1e-4, atol=1e-5)  # params replayed


def test_thermal_checks_are_rate_limited_and_can_be_disabled(fakes, helpers):
    thermo = Thermometer()
    router = DeviceRouter(helpers.tanh_graph(64), DevicePolicy.only(["cpu"]), params={"w": W},
                          throttle_check_s=3600.0, thermal=thermo)
    for _ in range(5):
        router.run({"x": np.ones(64, np.float32)})
    assert thermo.reads == 1  # only the initial reading
    router.with_rebench_on_throttle(False).throttle_check_s = 0.0
    thermo.state = ThermalState("throttled")
    router.run({"x": np.ones(64, np.float32)})
    assert router.rewarms == 0 and "rebench_on_throttle=False" in repr(router)


def test_router_from_env(fakes, helpers, monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "gpu")
    router = DeviceRouter.from_env(helpers.tanh_graph(64), params={"w": W}, rebench_on_throttle=False)
    assert router.devices() == [GPU] and router.runner.compiled_devices() == [GPU]


def test_flexible_session(fakes, helpers, monkeypatch):
    g = helpers.tanh_graph()
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0)
    for dev, name in (("cpu", "cpu"), ("rocm", "fake-rocm")):
        helpers.write_calibration(dev, name, roundtrip=50_000.0)
    session = FlexibleSession(DevicePolicy.only(["cpu", "gpu"]))
    assert session.compile_resolved(g).device == GPU
    assert session.compile_resolved(g, device="cpu").device == CPU
    compiled = session.compile_on(g, "cpu")
    compiled.set_param("w", np.ones(4, np.float32))
    np.testing.assert_allclose(compiled.run({"x": np.zeros(4, np.float32)})[0], np.ones(4))
    with pytest.raises(PolicyError, match="not in the DevicePolicy allow-list"):
        session.compile_on(g, "rocm")
    with pytest.raises(DeviceUnavailableError, match="no NVIDIA driver"):
        FlexibleSession(DevicePolicy.all()).compile_on(g, "cuda")
    monkeypatch.setenv("RLX_DEVICE", "cpu")
    monkeypatch.setenv("RLX_DENY_DEVICES", "gpu")
    env_session = FlexibleSession.from_env(precision="f32")
    assert env_session.compile_resolved(g).device == CPU
    assert env_session.options.precision.value == "f32" and "deny=gpu" in repr(env_session)

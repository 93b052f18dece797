"""GraphDevices: parity across devices with shared params, lazy compiles, fallback chains
(unavailable devices, run-time failures), observability, benchmark picks."""
import logging

import numpy as np
import pytest

from rlx_core.errors import DeviceFallbackError, DeviceUnavailableError, InputError, ParamError, PolicyError
from rlx_core.runtime import Device
from rlx_core.select import DevicePolicy, GraphDevices, benchmark_devices

CPU, GPU = Device("cpu"), Device("gpu")
X = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
W = np.array([1.0, 2.0, -0.5, 3.0], np.float32)


@pytest.fixture
def runner(fakes, helpers):
    r = GraphDevices(helpers.tanh_graph(), DevicePolicy.all(), calibrate=False)  # tests write figures
    r.set_param("w", W)
    return r


def test_parity_across_devices_with_shared_params(runner, helpers):
    want = helpers.expected_tanh(X, W)
    cpu, gpu = runner.run("cpu", {"x": X}), runner.run("gpu", {"x": X})
    np.testing.assert_allclose(cpu[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-4, atol=1e-5)
    assert set(runner.compiled_devices()) == {CPU, GPU}


def test_params_reach_devices_compiled_before_and_after(runner, helpers):
    runner.run("cpu", {"x": X})
    w2 = W * 2
    runner.set_param("w", w2)  # pushed to the compiled cpu graph
    np.testing.assert_allclose(runner.run("cpu", {"x": X})[0], helpers.expected_tanh(X, w2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(runner.run("gpu", {"x": X})[0], helpers.expected_tanh(X, w2), rtol=1e-4, atol=1e-5)


def test_typed_params_and_sync(runner, helpers, fakes):
    runner.set_param_typed("w", W.astype(np.float16).tobytes(), "f16")
    np.testing.assert_allclose(runner.run("gpu", {"x": X})[0], helpers.expected_tanh(X, W), rtol=1e-3)
    exe = runner.compile("gpu").executable
    exe.params.clear()
    runner.sync_params_to_all()
    np.testing.assert_array_equal(exe.params["w"], W.astype(np.float16).astype(np.float32))


def test_bad_params_raise_at_set_time(runner):
    with pytest.raises(ParamError, match="has no param named 'v'; its params: w"):
        runner.set_param("v", W)
    with pytest.raises(ParamError, match=r"expected dims \[4\], got \[3\]"):
        runner.set_param("w", W[:3])
    with pytest.raises(ParamError, match="expected dtype f32"):
        runner.set_param("w", W.astype(np.float64))


def test_compile_is_lazy_and_cached(runner, fakes):
    assert runner.compiled_devices() == []
    assert runner.compile("gpu") is runner.compile("wgpu")
    assert fakes.gpu.compiles == 1
    runner.invalidate_cache()
    assert runner.compiled_devices() == []
    runner.run("gpu", {"x": X})
    assert fakes.gpu.compiles == 2


def test_compile_refuses_devices_that_cannot_run(runner, fakes, helpers):
    with pytest.raises(DeviceUnavailableError, match="no NVIDIA driver"):
        runner.run("cuda", {"x": X})
    with pytest.raises(DeviceUnavailableError, match="unsupported"):
        runner.compile("metal")
    denied = GraphDevices(helpers.tanh_graph(), DevicePolicy.all().with_deny(["gpu"]))
    with pytest.raises(PolicyError, match="denied"):
        denied.compile("gpu")


def test_run_try_falls_back_past_unavailable_and_failing_devices(runner, helpers, caplog):
    caplog.set_level(logging.WARNING, logger="rlx.select")
    device, out = runner.run_try(["cuda", "rocm", "metal", "cpu", "gpu"], {"x": X})
    assert device == CPU
    np.testing.assert_allclose(out[0], helpers.expected_tanh(X, W), rtol=1e-4, atol=1e-5)
    record = runner.last_run
    assert record.device == CPU and record.method == "run_try" and record.fell_back
    assert [d for d, _ in record.attempts] == ["cuda", "rocm", "metal"]
    assert "no NVIDIA driver" in record.attempts[0][1] and "device lost" in record.attempts[1][1]
    assert "RuntimeError" in record.attempts[1][1]
    messages = " ".join(r.message for r in caplog.records)
    assert "device rocm failed (RuntimeError" in messages and "served by cpu after 3 failed" in messages
    assert runner.served["cpu"] == 1


def test_all_failing_lists_every_attempt(runner):
    with pytest.raises(DeviceFallbackError) as e:
        runner.run_try(["cuda", "rocm", "tpu"], {"x": X})
    assert [d for d, _ in e.value.attempts] == ["cuda", "rocm", "tpu"]
    text = str(e.value)
    assert "cuda: DeviceUnavailableError" in text and "rocm: RuntimeError: fake-rocm: device lost" in text
    assert "tpu: DeviceUnavailableError" in text and "no installed plugin" in text
    with pytest.raises(DeviceFallbackError, match="empty fallback chain"):
        runner.run_try([], {"x": X})


def test_caller_errors_do_not_fall_back(runner):
    with pytest.raises(InputError, match="missing input"):
        runner.run_try(["gpu", "cpu"], {})
    with pytest.raises(InputError, match="expected dims"):
        runner.run_chain({"x": X[:2]})
    assert runner.history == type(runner.history)([], maxlen=runner.history.maxlen)


def test_run_chain_uses_hint_then_env_then_ranking(runner, helpers, monkeypatch):
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0)
    helpers.write_calibration("cpu", "cpu", roundtrip=50_000.0)
    helpers.write_calibration("rocm", "fake-rocm", roundtrip=10.0)  # fastest on paper, fails at run time
    assert runner.resolve_chain() == [Device("rocm"), GPU, CPU]
    device, _ = runner.run_chain({"x": X})
    assert device == GPU and runner.last_run.attempts[0][0] == "rocm"
    assert runner.run_chain({"x": X}, hint="cpu")[0] == CPU
    monkeypatch.setenv("RLX_DEVICE_CHAIN", "cuda,cpu")
    assert runner.resolve_chain() == [Device("cuda"), CPU]
    assert runner.run_chain({"x": X})[0] == CPU


def test_run_resolved_and_fastest(runner, helpers, monkeypatch):
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0)
    for dev, name in (("cpu", "cpu"), ("rocm", "fake-rocm")):
        helpers.write_calibration(dev, name, roundtrip=50_000.0)
    assert runner.fastest() == GPU and runner.devices() == [Device("rocm"), GPU, CPU]
    runner.run_resolved({"x": X})
    assert runner.last_run.device == GPU and runner.last_run.method == "run_resolved"
    runner.run_resolved_with_inputs({"x": X}, device="cpu")
    assert runner.last_run.device == CPU
    monkeypatch.setenv("RLX_DEVICE", "cpu")
    assert runner.resolve() == CPU
    monkeypatch.setenv("RLX_DEVICE", "metal")
    with pytest.raises(DeviceUnavailableError, match=r"RLX_DEVICE=metal: device 'metal' cannot be used: unsupported"):
        runner.run_resolved({"x": X})
    with pytest.raises(DeviceUnavailableError, match=r"requested device 'cuda'.*no NVIDIA driver"):
        runner.run_resolved({"x": X}, device="cuda")


def test_benchmark_pick_runs_once_and_is_cached(fakes, helpers):
    fakes.gpu.delay_s = 0.002  # the fake gpu is slower than the CPU on this tiny graph
    runner = GraphDevices(helpers.tanh_graph(), DevicePolicy.only(["cpu", "gpu"]).with_benchmark_pick(3))
    runner.set_param("w", W)
    assert runner.resolve(inputs={"x": X}) == CPU
    runs_after_pick = runner.compile("gpu").executable.runs
    assert runs_after_pick == 4  # one warm-up + 3 timed
    runner.run_resolved({"x": X})
    assert runner.last_run.device == CPU and runner.compile("gpu").executable.runs == runs_after_pick
    assert runner.pick().how == "benchmark" and "benchmarked just now (3 runs each)" in runner.pick().reason
    other = GraphDevices(helpers.tanh_graph(), runner.policy)  # same graph: the times are reused
    other.set_param("w", W)
    assert other.resolve(inputs={"x": X}) == CPU and other.compiled_devices() == []
    runner.invalidate_cache()  # conditions changed: measure again
    assert runner.resolve(inputs={"x": X}) == CPU and runner.compile("gpu").executable.runs == 4


def test_benchmark_results_sorted_with_failures_last(runner):
    results = runner.benchmark({"x": X}, runs=3)
    assert [r.label for r in results][-1] == "rocm" and results[-1].error.startswith("RuntimeError")
    ok = [r for r in results if r.ok]
    assert [r.median_ns for r in ok] == sorted(r.median_ns for r in ok)
    assert all(r.runs == 3 and r.min_ns <= r.median_ns for r in ok)
    with pytest.raises(PolicyError, match="runs >= 1"):
        runner.benchmark({"x": X}, runs=0)


def test_benchmark_devices_function(fakes, helpers):
    results = benchmark_devices(helpers.tanh_graph(), {"x": X}, params={"w": W}, runs=2, devices=["cpu", "gpu"])
    assert {r.label for r in results} == {"cpu", "gpu"} and all(r.ok for r in results)


def test_warm_all_compiles_every_viable_device(runner, fakes):
    assert set(runner.warm_all()) == {Device("rocm"), GPU, CPU}  # rocm compiles; it fails only when run
    assert set(runner.compiled_devices()) == {Device("rocm"), GPU, CPU}


def test_report_and_repr(runner):
    rows = {r.label: r for r in runner.report()}
    assert rows["cpu"].supports_graph and rows["metal"].supports_graph is False
    assert "tanh-block" in repr(runner)


def test_policy_from_env_by_default(fakes, helpers, monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "cpu")
    assert GraphDevices(helpers.tanh_graph()).devices() == [CPU]
    assert GraphDevices.from_env(helpers.tanh_graph()).devices() == [CPU]
    monkeypatch.setenv("RLX_DEVICES", "cpu,warp")
    with pytest.raises(PolicyError, match="RLX_DEVICES"):
        GraphDevices(helpers.tanh_graph())

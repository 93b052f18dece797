"""A backend that returns outputs of the wrong shape or dtype (issue 20, item 6): the
compiled graph notices (BackendOutputError), and fallback chains treat it like any other
device failure -- the next device serves the run, and the attempt is recorded."""
import numpy as np
import pytest

from rlx_core.errors import ArgumentTypeError, BackendOutputError, DeviceFallbackError, PluginError
from rlx_core.runtime import Device
from rlx_core.select import DevicePolicy, DeviceRouter, FlexibleSession, GraphDevices

X = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
W = np.array([1.0, 2.0, -0.5, 3.0], np.float32)


@pytest.fixture
def lying(helpers):
    """A 'gpu' whose runs return each output transposed to a column and widened to f64."""
    class LyingBackend(helpers.RefBackend):
        def compile(self, graph, options):
            exe = super().compile(graph, options)
            honest = exe.run
            exe.run = lambda inputs, out=None: [np.asarray(o, np.float64).reshape(-1, 1) for o in honest(inputs)]
            return exe

    backend = LyingBackend("lying-gpu", "gpu")
    from rlx_core.runtime.registry import register_backends
    register_backends(helpers.FakePlugin(backend))
    return backend


def test_the_compiled_graph_reports_the_mismatch(lying, helpers):
    compiled = FlexibleSession(DevicePolicy.all()).compile_on(helpers.tanh_graph(), "gpu")
    compiled.set_param("w", W)
    with pytest.raises(BackendOutputError, match=r"backend 'lying-gpu' returned output 0 .* as \[4, 1\] f64; "
                                                 r"the graph declares \[4\] f32") as info:
        compiled.run({"x": X})
    assert isinstance(info.value, PluginError)


def test_run_chain_falls_back_past_a_backend_returning_wrong_shapes(lying, helpers):
    runner = GraphDevices(helpers.tanh_graph(), DevicePolicy.all(), calibrate=False)
    runner.set_param("w", W)
    device, out = runner.run_try(["gpu", "cpu"], {"x": X})
    assert device == Device("cpu")
    np.testing.assert_allclose(out[0], helpers.expected_tanh(X, W), rtol=1e-4, atol=1e-5)
    (failed, why), = runner.last_run.attempts
    assert failed == "gpu" and why.startswith("BackendOutputError")
    with pytest.raises(DeviceFallbackError, match="gpu: BackendOutputError"):
        runner.run_try(["gpu"], {"x": X})


def test_router_serves_from_the_next_device(lying, helpers, monkeypatch):
    monkeypatch.setenv("RLX_DEVICE_CHAIN", "gpu,cpu")
    router = DeviceRouter(helpers.tanh_graph(), DevicePolicy.from_env(), params={"w": W}, rebench_on_throttle=False)
    device, out = router.run_chain({"x": X})
    assert device == Device("cpu") and router.runner.last_run.fell_back
    np.testing.assert_allclose(out[0], helpers.expected_tanh(X, W), rtol=1e-4, atol=1e-5)


def test_fallback_entry_points_take_only_graphs(fakes):
    for call in (lambda: GraphDevices("graph"), lambda: FlexibleSession(DevicePolicy.all()).compile_on("g", "cpu"),
                 lambda: FlexibleSession(DevicePolicy.all()).resolve(5), lambda: DeviceRouter(None)):
        with pytest.raises(ArgumentTypeError, match=r"\(graph=\.\.\.\) takes an rlx_core.Graph"):
            call()

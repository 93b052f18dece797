"""The metal device: probes and blockers, the test aid, the adapter spec, unified memory,
backend options, `rlx devices`, and the MPS GEMM path (with a numpy engine: MPS itself
needs macOS)."""
import subprocess
import sys

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.errors import DeviceError, DeviceUnavailableError, PolicyError, RlxError
from rlx_core.runtime import registry
from rlx_metal import env, mps, plugin

OFF_MAC = pytest.mark.skipif(sys.platform == "darwin", reason="Metal may exist here")


def _matmul_graph(m=64, k=32, n=48, batch=()):
    g = Graph("mm")
    a = g.input("a", batch + (m, k))
    b = g.param("b", (k, n))
    g.set_outputs([g.relu(g.matmul(a, b))])
    return g


def _data(g):
    rng = np.random.default_rng(0)
    return {n.attrs["name"]: rng.standard_normal(n.attrs["dims"]).astype(np.float32)
            for n in g.input_nodes + g.param_nodes}


@pytest.mark.no_adapter
def test_plugin_module_is_cheap_and_declares_two_devices():
    code = ("import sys, rlx_metal.plugin as p; print(p.RLX_PLUGIN_API, len(p.rlx_backends()), "
            "'wgpu' in sys.modules, 'coremltools' in sys.modules, 'rlx_wgpu' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "2", "False", "False", "False"]
    assert {(f.name, f.device.label) for f in plugin.rlx_backends()} == {("metal", "metal"), ("coreml-ane", "ane")}


@OFF_MAC
@pytest.mark.no_adapter
def test_metal_is_unavailable_off_macos_with_the_reason(monkeypatch):
    monkeypatch.delenv(env.ADAPTER_ENV)
    for avail in (registry().entry("metal").availability(full=False), registry().entry("metal").availability()):
        assert not avail.ok
        assert "Metal exists only on macOS (this machine runs Linux)" in avail.reason
        assert "RLX_METAL_ADAPTER_BACKEND=vulkan" in avail.reason and "test aid" in avail.reason
    with pytest.raises(DeviceUnavailableError, match="Metal exists only on macOS"):
        Session("metal")


@pytest.mark.no_adapter
@pytest.mark.parametrize("var, value", [(env.ADAPTER_ENV, "cuda"), (env.POWER_ENV, "fastest")])
def test_invalid_settings_raise_policy_error_naming_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(PolicyError, match=var):
        plugin.metal_blocker()
    avail = registry().entry("metal").availability()
    assert not avail.ok and var in avail.reason


@pytest.mark.no_adapter
def test_the_spec_asks_for_the_metal_backend_type_only(monkeypatch):
    from rlx_metal.metal import device_spec
    monkeypatch.delenv(env.ADAPTER_ENV)
    spec = device_spec()
    assert (spec.label, spec.backend_type, spec.unified_memory, spec.power_preference) == \
        ("metal", "Metal", "auto", "high-performance")
    monkeypatch.setenv(env.POWER_ENV, "low-power")
    assert device_spec().power_preference == "low-power"
    monkeypatch.setenv(env.ADAPTER_ENV, "vulkan")
    assert device_spec().backend_type == "Vulkan"


@OFF_MAC
def test_no_metal_adapter_off_macos_even_when_the_platform_check_is_passed(monkeypatch):
    from rlx_wgpu import api

    from rlx_metal.metal import device_spec
    monkeypatch.delenv(env.ADAPTER_ENV)
    with pytest.raises(DeviceUnavailableError, match="no wgpu adapter of backend type Metal"):
        api.open_device(device_spec())


def test_the_test_aid_runs_on_vulkan_says_so_and_maps_its_arenas():
    avail = registry().entry("metal").availability()
    assert avail.ok, avail.reason
    if sys.platform != "darwin":
        assert avail.detail["test_aid"] is True and avail.detail["backend_type"] == "Vulkan"
        assert "TEST AID" in avail.reason and "not" in avail.reason.split("TEST AID")[1]
    backend = registry().backend("metal")
    gpu = backend.gpu
    shared = gpu.info["adapter_type"] in ("IntegratedGPU", "CPU") and "mappable-primary-buffers" in gpu.features
    assert gpu.unified_memory is shared and avail.detail["unified_memory"] is shared
    g = _matmul_graph()
    compiled = Session("metal").compile(g)
    data = _data(g)
    compiled.set_param("b", data["b"])
    out = compiled.run({"a": data["a"]})[0]
    np.testing.assert_allclose(out, np.maximum(data["a"] @ data["b"], 0), rtol=1e-5, atol=1e-5)
    assert compiled.executable.mapped is shared


def test_backend_options():
    g = _matmul_graph()
    for options in ({"gemm": "wgsl"}, {"gemm": "auto", "matmul_tile": "16x16x8/4x4"}):
        Session("metal", options=CompileOptions(backend=options)).compile(g)
    with pytest.raises(RlxError, match="unknown metal backend option"):
        Session("metal", options=CompileOptions(backend={"tile": 1})).compile(g)
    with pytest.raises(DeviceError, match="gemm='fast'"):
        Session("metal", options=CompileOptions(backend={"gemm": "fast"})).compile(g)
    if sys.platform != "darwin":
        with pytest.raises(DeviceError, match="needs the Metal adapter"):
            Session("metal", options=CompileOptions(backend={"gemm": "mps"})).compile(g)


@OFF_MAC
@pytest.mark.no_adapter
def test_rlx_devices_lists_metal_and_ane_with_their_blockers(monkeypatch, capsys):
    from rlx_core.cli import main
    monkeypatch.delenv(env.ADAPTER_ENV)
    monkeypatch.delenv(env.UNITS_ENV, raising=False)
    main(["devices"])
    out = capsys.readouterr().out
    blockers = out.split("blockers:")[1]
    assert "metal: not available: Metal exists only on macOS (this machine runs Linux); " \
           "RLX_METAL_ADAPTER_BACKEND=vulkan runs this plugin's code path on a Vulkan adapter" in blockers
    assert "ane: not available: Core ML's runtime exists only on macOS (this machine runs Linux): coremltools " \
           "builds and validates ML programs here, but cannot run them" in blockers


# --- MPS GEMM ------------------------------------------------------------------------------
class NumpyEngine:
    """Stands in for MpsEngine: the same batched-GEMM contract, computed by numpy."""

    def __init__(self):
        self.calls = []

    def gemm(self, a, b):
        assert a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
        self.calls.append((a.shape, b.shape))
        return np.matmul(a, b)


@pytest.mark.no_adapter
@pytest.mark.parametrize("a_dims, b_dims", [((5, 3), (3, 4)), ((3,), (3, 4)), ((5, 3), (3,)), ((3,), (3,)),
                                            ((2, 1, 5, 3), (4, 3, 6)), ((5, 3), (2, 3, 4)), ((2, 5, 3), (3, 4))])
def test_matmul_host_promotes_and_broadcasts_as_numpy(a_dims, b_dims):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(a_dims).astype(np.float32), rng.standard_normal(b_dims).astype(np.float32)
    got = mps.matmul_host(NumpyEngine().gemm, a, b)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-6)
    assert got.shape == np.matmul(a, b).shape


@pytest.mark.no_adapter
def test_which_matmuls_mps_takes():
    big, small = _matmul_graph(512, 512, 512), _matmul_graph(8, 8, 8)
    node = next(n for n in big.nodes if n.kind == "matmul")
    assert mps.eligible(big, node) and not mps.eligible(small, next(n for n in small.nodes if n.kind == "matmul"))
    g = Graph("half")
    a = g.input("a", (512, 512), "f16")
    g.set_outputs([g.matmul(a, a)])
    assert not mps.eligible(g, g.nodes[-1])  # MPS f16 accumulates in f16: not the reference's numbers
    from rlx_metal.calibrate import decide_engine
    assert decide_engine(100.0, 150.0) == "mps" and decide_engine(100.0, 90.0) == "wgsl"
    assert decide_engine(100.0, None) == "wgsl"


@OFF_MAC
@pytest.mark.no_adapter
def test_mps_is_unavailable_off_macos():
    assert mps.available() == (False, "Metal Performance Shaders exist only on macOS")


def test_the_mps_path_runs_large_matmuls_as_host_steps(monkeypatch):
    """The override plumbing of the MPS path, with numpy standing in for MPS."""
    from rlx_metal import metal
    fake = NumpyEngine()
    monkeypatch.setattr(metal, "gemm_engine", lambda option, gpu: "mps" if option != "wgsl" else "wgsl")
    monkeypatch.setattr(mps, "engine", lambda: fake)
    g = _matmul_graph(256, 256, 256, batch=(2,))
    data = _data(g)
    compiled = Session("metal").compile(g)
    compiled.set_param("b", data["b"])
    for scale in (1.0, -2.0):
        out = compiled.run({"a": data["a"] * scale})[0]
        np.testing.assert_allclose(out, np.maximum((data["a"] * scale) @ data["b"], 0), rtol=1e-4, atol=1e-4)
    assert fake.calls == [((2, 256, 256), (2, 256, 256))] * 2
    wgsl = Session("metal", options=CompileOptions(backend={"gemm": "wgsl"})).compile(g)
    wgsl.set_param("b", data["b"])
    np.testing.assert_allclose(wgsl.run({"a": data["a"]})[0], np.maximum(data["a"] @ data["b"], 0), rtol=1e-4,
                               atol=1e-4)
    assert len(fake.calls) == 2

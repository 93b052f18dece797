"""rlx_wgpu.api, the public API other distributions build on (rlx-metal): devices opened
from a caller's spec, unified memory (a mapped arena), caller-supplied tuning, host-kernel
overrides, DeviceBackend subclasses and uncached measurement."""
import subprocess
import sys

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.errors import DeviceUnavailableError, RlxError
from rlx_core.runtime import register_backends, registry
from rlx_wgpu import api

pytest.importorskip("wgpu")


def _vulkan() -> None:
    if not any(a["backend_type"] == "Vulkan" for a in api.list_adapters()):
        pytest.skip("no Vulkan adapter here")


def _spec(**kw):
    return api.DeviceSpec(kw.pop("label", "api-test"), kw.pop("backend_type", "Vulkan"), **kw)


def _mlp() -> Graph:
    g = Graph("mlp")
    x = g.input("x", (8, 16))
    w = g.param("w", (16, 4))
    h = g.relu(g.matmul(x, w) + 1.0)
    g.set_outputs([h, g.sum(h, axes=[1])])
    return g


def _run(exe, g, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    exe.set_param("w", w)
    h = np.maximum(x @ w + 1.0, 0)
    return exe.run({"x": x}), [h, h.sum(axis=1)]


@pytest.mark.no_adapter
def test_importing_the_api_is_cheap():
    code = "import sys, rlx_wgpu.api as a; print(sorted(a.__all__) == sorted(set(a.__all__)), 'wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]
    for name in api.__all__:
        assert getattr(api, name) is not None, name


@pytest.mark.no_adapter
def test_spec_is_validated_and_hashable():
    with pytest.raises(ValueError, match="power_preference"):
        api.DeviceSpec("x", None, power_preference="fast")
    with pytest.raises(ValueError, match="unified_memory"):
        api.DeviceSpec("x", None, unified_memory="yes")
    assert hash(_spec()) == hash(_spec()) and _spec() != _spec(unified_memory=True)


@pytest.mark.no_adapter
def test_power_preference_orders_adapters():
    infos = [{"adapter_type": "DiscreteGPU", "backend_type": "Metal"},
             {"adapter_type": "IntegratedGPU", "backend_type": "Metal"}]
    assert sorted(infos, key=api.adapter_rank)[0]["adapter_type"] == "DiscreteGPU"
    assert sorted(infos, key=lambda i: api.adapter_rank(i, "high-performance"))[0]["adapter_type"] == "DiscreteGPU"
    assert sorted(infos, key=lambda i: api.adapter_rank(i, "low-power"))[0]["adapter_type"] == "IntegratedGPU"


def test_a_missing_backend_type_or_name_says_what_exists():
    with pytest.raises(DeviceUnavailableError, match="backend type Metal"):
        api.open_device(_spec(backend_type="Metal"))
    with pytest.raises(DeviceUnavailableError, match="named like 'no such adapter'"):
        api.open_device(_spec(backend_type=None, adapter_name="no such adapter"))


@pytest.mark.parametrize("unified", [False, True])
def test_compile_graph_on_an_opened_device(unified):
    _vulkan()
    dev = api.open_device(_spec(unified_memory=unified))
    assert api.open_device(_spec(unified_memory=unified)) is dev and api.opened_device(_spec(unified_memory=unified)) is dev
    assert dev.info["backend_type"] == "Vulkan" and dev.describe()["profile"] == "api-test"
    assert dev.unified_memory is (unified and api.UNIFIED_MEMORY_FEATURE in dev.features)
    g = _mlp()
    exe = api.compile_graph(g, CompileOptions(), dev)
    # a mapped arena, or a software adapter, runs submits synchronously
    queued = set() if exe.mapped or api.is_software(dev.info) else {"async_pipeline"}
    assert exe.queues is bool(queued)
    assert exe.capabilities == (api.CAPABILITIES - {"async_pipeline"}) | queued and exe.mapped is dev.unified_memory
    for seed in (0, 1):  # a second run with other data: nothing stale
        got, want = _run(exe, g, seed)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    out = [np.empty((8, 4), np.float32), np.empty(8, np.float32)]
    x = np.ones((8, 16), np.float32)
    assert all(a is b for a, b in zip(exe.run({"x": x}, out=out), out))
    assert exe.last_submits == 1


def test_auto_unified_memory_maps_the_arena_of_a_shared_memory_adapter():
    _vulkan()
    dev = api.open_device(_spec(unified_memory="auto"))
    shared = dev.info["adapter_type"] in ("IntegratedGPU", "CPU")
    assert dev.unified_memory is (shared and api.UNIFIED_MEMORY_FEATURE in dev.features)
    assert dev.describe()["unified_memory"] is dev.unified_memory


def test_unified_memory_with_control_flow_and_rng():
    _vulkan()
    dev = api.open_device(_spec(unified_memory=True))
    g = Graph("loop")
    x = g.input("x", (4,))
    y = g.while_loop(lambda sg, v: sg.lt(sg.sum(v), 100.0), lambda sg, v: v * 2.0, x, max_iterations=10)
    noise = g.rng_uniform((4,), low=0.0, high=1.0, seed=7)
    g.set_outputs([y, noise])
    exe = api.compile_graph(g, CompileOptions(), dev)
    a = exe.run({"x": np.ones(4, np.float32)})
    b = Session("cpu").compile(g).run({"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


def test_overrides_run_nodes_on_the_host():
    _vulkan()
    calls = []

    def overrides(graph, node):
        if node.kind in ("matmul", "add"):
            def kernel(n, inputs):
                calls.append(n.kind)
                return inputs[0] @ inputs[1] if n.kind == "matmul" else inputs[0] + inputs[1]
            return kernel
        return None

    for unified in (False, True):
        calls.clear()
        dev = api.open_device(_spec(unified_memory=unified))
        g = _mlp()
        exe = api.compile_graph(g, CompileOptions(), dev, overrides)
        got, want = _run(exe, g)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        assert calls == ["matmul", "add"]  # the add stays a step of its own (not fused into relu)


def test_a_host_kernel_returning_the_wrong_dims_says_so():
    _vulkan()
    dev = api.open_device(_spec())
    g = _mlp()
    exe = api.compile_graph(g, CompileOptions(), dev,
                            lambda graph, node: (lambda n, i: np.zeros(3)) if node.kind == "matmul" else None)
    with pytest.raises(RuntimeError, match="returned dims"):
        _run(exe, g)


def test_caller_supplied_tuning_picks_the_large_tile():
    _vulkan()
    seen = []

    def tuning(device):
        seen.append(device)
        return {"matmul_tile": "64x32x8/4x4"}  # valid, and not one of the built-in tiles

    dev = api.open_device(_spec(label="api-tuned", tuning=tuning))
    assert dev.tuned_matmul_tile() == "64x32x8/4x4" and seen == [dev]
    assert str(api.pick_tile(512, 512, tuned=dev.tuned_matmul_tile())) == "64x32x8/4x4"
    assert str(api.pick_tile(512, 512, tuned="nonsense")) == "128x128x8/8x8/db"
    assert str(api.pick_tile(512, 512, tuned="128x128x16/8x8/db", workgroup_bytes=16384)) == "128x128x8/8x8/db"
    assert str(api.pick_tile(512, 512, workgroup_bytes=8192)) == "64x64x8/4x4"
    assert str(api.parse_tile("64x64x8/4x4")) in api.TILES
    with pytest.raises(RlxError):
        api.parse_tile("3x3")
    for bad in ("128x128x8/8x8/xx", "128x128x8/8x8/db/db", "128x128x8/8x8/w4/w8", "128x128x8/8x8/w3", "64x64x8/4x4/w32"):
        with pytest.raises(RlxError, match="matmul_tile"):
            api.parse_tile(bad)
    assert api.parse_tile("128x128x16/8x8/w8/db") == api.TILES["128x128x16/8x8/db/w8"]
    assert str(api.parse_tile("128x128x16/8x8/p/db")) == "128x128x16/8x8/db/p"
    g = Graph("big")
    a = g.input("a", (512, 64))
    b = g.input("b", (64, 512))
    g.set_outputs([g.matmul(a, b)])
    rng = np.random.default_rng(0)
    av, bv = rng.standard_normal((512, 64)).astype(np.float32), rng.standard_normal((64, 512)).astype(np.float32)
    got = api.compile_graph(g, CompileOptions(), dev).run({"a": av, "b": bv})[0]
    np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4)


def test_measure_is_uncached_and_reports_the_tiles_it_tried(tmp_path, monkeypatch):
    _vulkan()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    dev = api.open_device(_spec())
    result = api.measure(dev, 64, tiles=("64x64x8/4x4", "16x16x8/4x4"), progress=lambda m: None)
    assert set(result["matmul_gflops_by_tile"]) == {"64x64x8/4x4", "16x16x8/4x4"}
    assert result["matmul_tile"] in result["matmul_gflops_by_tile"] and result["sgemm_gflops"] > 0
    assert result["profile"] == "api-test" and not list(tmp_path.iterdir())


def test_a_device_backend_subclass_serves_a_device():
    _vulkan()

    class Custom(api.DeviceBackend):
        option_names = api.DeviceBackend.option_names + ("extra",)

        def overrides(self, graph, options):
            return None if not options.backend.get("extra") else (lambda g, n: None)

    backend = Custom("api-custom", "vulkan", _spec())
    assert backend.is_available().ok and backend.supported_ops()["matmul"]
    g = _mlp()
    exe = backend.compile(g, CompileOptions(backend={"extra": True, "matmul_tile": "16x16x8/4x4"}))
    got, want = _run(exe, g)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(RlxError, match="unknown api-custom backend option"):
        backend.compile(g, CompileOptions(backend={"nope": 1}))
    assert registry() is not None and register_backends  # the registry is untouched by a bare Backend

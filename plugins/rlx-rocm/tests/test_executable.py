"""The runtime contract beyond the conformance suite: the arena plan, params, out=,
rng re-seeding, tracing, calibration."""
import json

import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session
from rlx_core.rng import RngOptions, philox_uniform, combine_seed


def test_values_share_the_arena_and_params_are_uploaded_once():
    g = Graph("chain")
    x = g.input("x", (64, 64))
    w = g.param("w", (64, 64))
    h = x
    for _ in range(4):
        h = g.softmax(g.matmul(h, w))
    g.set_outputs([h])
    compiled = Session("rocm").compile(g)
    exe = compiled.executable
    assert exe.arena_bytes < 7 * 64 * 64 * 4  # 4 products + 4 softmaxes + x + w would be 10 buffers
    wv = np.eye(64, dtype=np.float32)
    compiled.set_param("w", wv)
    wv[:] = 0  # the caller may reuse its array
    xv = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    a = compiled.run({"x": xv})[0]
    b = compiled.run({"x": xv})[0]
    want = xv
    for _ in range(4):
        e = np.exp(want - want.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(a, b)


def test_out_buffers_are_written_in_place():
    g = Graph("two")
    x = g.input("x", (3, 4))
    g.set_outputs([g.exp(x), g.sum(x, 1)])
    compiled = Session("rocm").compile(g)
    outs = [np.empty((3, 4), np.float32), np.empty((3,), np.float32)]
    xv = np.ones((3, 4), np.float32)
    got = compiled.run({"x": xv}, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    np.testing.assert_allclose(outs[0], np.e, rtol=1e-6)
    np.testing.assert_allclose(outs[1], 4)


def test_rng_is_philox_bit_for_bit_and_reseeds_without_recompiling():
    g = Graph("rng")
    g.set_outputs([g.rng_uniform((4099,), key=5, low=-1.0, high=2.0)])
    compiled = Session("rocm").compile(g, CompileOptions(rng=RngOptions(seed=11)))
    first = compiled.run({})[0]
    np.testing.assert_array_equal(first, philox_uniform(combine_seed(11, 5), 4099, -1.0, 2.0))
    compiled.set_rng(RngOptions(seed=12))
    np.testing.assert_array_equal(compiled.run({})[0], philox_uniform(combine_seed(12, 5), 4099, -1.0, 2.0))


def test_tracing_records_every_step(caplog):
    import logging
    g = Graph("traced")
    x = g.input("x", (8,))
    g.set_outputs([g.softmax(g.exp(x))])
    compiled = Session("rocm").compile(g, CompileOptions(trace=True))
    with caplog.at_level(logging.INFO, logger="rlx.trace"):
        compiled.run({"x": np.zeros(8, np.float32)})
    assert "traced on rocm" in caplog.text and "softmax" in caplog.text


@pytest.fixture
def calib_home(tmp_path, monkeypatch):
    from rlx_rocm.opencl import open_device
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    dev = open_device()
    saved = dev.tuning
    yield tmp_path
    dev.tuning = saved


def test_calibration_measures_caches_and_tunes_the_gemm_tile(calib_home):
    from rlx_core.runtime import Device, registry
    from rlx_rocm.calibrate import KEYS, cache_path, calibrate
    from rlx_rocm.opencl import open_device
    first = calibrate(matmul_size=64)
    assert all(first[k] > 0 for k in KEYS)
    assert first["software"] is open_device().software
    assert first["gemm_tile"] in first["matmul_gflops_by_tile"]
    assert open_device().tuning["gemm_tile"] == first["gemm_tile"]
    assert json.loads(cache_path(open_device()).read_text()) == first
    assert registry().calibrate("rocm", Device("rocm")) == first  # the hook reads the cache
    cache_path(open_device()).write_text("{not json")
    assert calibrate(matmul_size=32)["matmul_size"] == 32  # a corrupt cache is measured again


def test_the_hook_ignores_other_backends():
    from rlx_core.runtime import Device
    from rlx_rocm import plugin
    assert plugin.rlx_calibrate(backend="cpu", device=Device("cpu"), force=False) is None


def _count5(dt="f32"):
    g = Graph("count5")
    x = g.input("x", (3,), dt)
    out = g.while_loop(lambda s, v, i: s.lt(i, 5),
                       lambda s, v, i: (s.add(v, s.cast(s.constant(np.int32(1)), v.dtype)), s.add(i, 1)),
                       [x, g.constant(np.int32(0))])
    g.set_outputs(list(out))
    return g


def _slots(exe):
    yield exe
    for child in exe._children.values():
        yield from _slots(child)


def test_kernels_get_the_arena_and_aligned_offsets_never_sub_buffers():
    """The H200 crash (NVIDIA's OpenCL segfaulted freeing graphs whose kernels were bound to
    sub-buffers of different sizes at one offset, as a while body's or psd's were): kernels
    are bound to the arena itself and a byte offset that is a multiple of the device's
    CL_DEVICE_MEM_BASE_ADDR_ALIGN."""
    import pyopencl as cl
    from rlx_core.ir import Ref
    from rlx_rocm.opencl import open_device
    dev = open_device()
    assert dev.alignment % (dev.device.mem_base_addr_align // 8) == 0 and dev.alignment >= 256
    g = Graph("psd")
    x = g.input("x", (3, 10))
    g.set_outputs([g.psd(x)])
    for graph in (g, _count5()):
        exe = Session("rocm").compile(graph).executable
        for e in _slots(exe):
            for step in e.steps:
                for d in getattr(step, "dispatches", ()):
                    assert "__o" in d.source
                    for arg in d.args:
                        if isinstance(arg, Ref):
                            buffer, offset = e.argument(arg)
                            assert buffer is e.arena and offset % dev.alignment == 0
            assert all(not isinstance(v, cl.Buffer) or v is e.arena for v in vars(e).values())


@pytest.mark.parametrize("dt", ["f32", "i64", "f16"])
def test_control_flow_compiles_runs_and_frees_repeatedly(dt):
    """while bodies whose slots share an origin: compiled, run, dropped and collected many
    times (where the H200 crashed, at release), in guard mode (see conftest)."""
    import gc
    xv = np.arange(3).astype(Graph("t").input("x", (3,), dt).dtype.np)
    for _ in range(5):
        compiled = Session("rocm").compile(_count5(dt))
        for _ in range(3):
            v, i = compiled.run({"x": xv})
            np.testing.assert_array_equal(v, xv + 5)
            assert int(i) == 5
        del compiled, v, i
        gc.collect()


def test_guard_mode_catches_a_write_outside_every_slot(monkeypatch):
    from rlx_core.errors import DeviceError
    monkeypatch.setenv("RLX_ROCM_GUARD", "1")
    compiled = Session("rocm").compile(_count5())
    compiled.run({"x": np.zeros(3, np.float32)})  # clean
    body = next(iter(compiled.executable._children.values()))
    lo, hi = body._gaps[0]
    import pyopencl as cl
    cl.enqueue_copy(body.queue, body.arena, np.zeros(1, np.uint8), dst_offset=hi - 1, is_blocking=True)
    with pytest.raises(DeviceError, match="written outside every slot"):
        compiled.run({"x": np.zeros(3, np.float32)})

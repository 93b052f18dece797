"""Control flow on a CUDA device (skipped without one): every model of the control-flow
check equals the reference with device-side conditional nodes (scans unrolled and as
WHILE nodes) and host-driven, the mode is what it should be, and steady-state
device-mode runs allocate nothing."""
import sys
from pathlib import Path

import numpy as np
import pytest
from rlx_core import CompileOptions, Graph, Session
from rlx_core.reference import evaluate

from rlx_cuda.probe import probe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from control_flow_gpu_check import HOST_BY_DESIGN, models  # noqa: E402

_avail = probe()
pytestmark = pytest.mark.skipif(not _avail.ok, reason=f"no CUDA device: {_avail.reason}")
MODELS = {m[0]: m for m in models()}


def _imported(name):
    _, _, model, graph, feeds, _ = MODELS[name]
    if model is None:
        return graph, {}, feeds
    from rlx_core.frontends.onnx import load_onnx
    imported = load_onnx(model)
    return imported.graph, imported.params, feeds


def _check(graph, params, feeds, want_mode, mode="auto", what=""):
    c = Session("cuda", options=CompileOptions(backend={"control_flow": mode})).compile(graph)
    c.set_params(params)
    expected = evaluate(graph, feeds, params)
    for run in range(4):  # eager, conditional graph built, replayed twice
        for got, want in zip(c.run(feeds), expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{what} run {run}")
    exe = c.executable
    assert exe.control_flow_mode == want_mode, exe.control_flow_reasons
    if want_mode == "device":
        assert exe.capture_error is None and "graph_capture" in exe.capabilities


@pytest.mark.parametrize("mode", ["auto", "host"])
@pytest.mark.parametrize("name", list(MODELS))
def test_control_flow_matches_the_reference(name, mode):
    want_mode = "host" if mode == "host" or name in HOST_BY_DESIGN else "device"
    _check(*_imported(name), want_mode, mode, name)


@pytest.mark.parametrize("name", ["loop-counted", "nested", "scan"])
def test_scans_too_long_to_unroll_loop_in_a_while_node(name, monkeypatch):
    monkeypatch.setattr("rlx_cuda.control.UNROLLED_LAUNCHES", 0)
    _check(*_imported(name), "device", what=name)


def test_unrolled_scan_whose_body_passes_inputs_through():
    """Body outputs that are body inputs (a carry swap, an x passed to ys): the hand-over
    between unrolled steps then goes through the carry in two launches."""
    rng = np.random.default_rng(1)
    g = Graph("swap_scan")
    a, b, xs = g.input("a", (8,), "f32"), g.input("b", (8,), "f32"), g.input("xs", (12, 8), "f32")
    (a_out, b_out), ys = g.scan(lambda sg, c0, c1, x_t: ((c1, c0 + x_t), (x_t, c0)), (a, b), xs, reverse=True)
    g.set_outputs([a_out, b_out, *ys])
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("a", 8), ("b", 8), ("xs", (12, 8)))}
    _check(g, {}, feeds, "device", what="swap")


def test_device_mode_runs_allocate_no_device_memory():
    import cupy as cp
    graph, params, feeds = _imported("while-if")
    c = Session("cuda", options=CompileOptions(backend={"outputs": "cupy"})).compile(graph)
    exe = c.executable
    args = [cp.asarray(feeds[name]) for name in exe._inputs]
    for _ in range(3):
        exe.run_device(args)
    pool = cp.get_default_memory_pool()
    calls = []
    cp.cuda.set_allocator(lambda n: (calls.append(n), pool.malloc(n))[1])
    try:
        for _ in range(5):
            exe.run_device(args)
        cp.cuda.get_current_stream().synchronize()
    finally:
        cp.cuda.set_allocator(pool.malloc)
    assert calls == [], f"steady-state runs allocated {calls}"
    assert exe.control_flow_mode == "device"

"""The async command stream (``compiled.submit``) on every device that runs here.

What every backend must do: capture inputs at submit (the caller's buffer is reused at
once), raise input errors at submit, give results equal to ``run``'s whatever order the
handles are waited in, never overwrite a result with a later submit, surface a failure
of the run itself at ``wait()``, and report ``done()`` truthfully. Backends claiming
``async_pipeline`` must really queue: submit returns before the device finishes.
"""
import os
import random
import time

import numpy as np
import pytest

from rlx_core import Graph, Session, Shape
from rlx_core.errors import InputError, InputTypeError, ParamError, RlxError

N = 6


@pytest.fixture
def device(any_device):
    return any_device


def _graph(n=16, rows=8, depth=1):
    g = Graph("stream")
    x = g.input("x", Shape((rows, n), "f32"))
    w = g.param("w", Shape((n, n), "f32"))
    b = g.param("b", Shape((n,), "f32"))
    y = x
    for _ in range(depth):
        y = g.tanh(g.matmul(y, w)) + b
    g.set_outputs([y, g.sum(y, axes=[1])])
    return g


def _compiled(device, graph=None):
    graph = graph or _graph()
    c = Session(device).compile(graph)
    rng = np.random.default_rng(0)
    for node in graph.param_nodes:
        c.set_param(node.attrs["name"], rng.standard_normal(node.attrs["dims"]).astype(np.float32) * 0.2)
    return c


def _close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_reused_buffer_any_wait_order_results_equal_run(device):
    c = _compiled(device)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2 * N)]
    expected = [[np.array(o) for o in c.run({"x": x})] for x in xs]
    buf = np.empty((8, 16), np.float32)
    handles = []
    for x in xs[:N]:
        buf[...] = x
        handles.append(c.submit({"x": buf}))
        buf[...] = np.nan  # the caller reuses its buffer at once
    order = list(range(N))
    random.Random(2).shuffle(order)
    first = {}
    for i in order[: N // 2]:
        first[i] = [np.array(o) for o in handles[i].wait()]
        _close(first[i], expected[i])
    for x in xs[N:]:  # later submits never overwrite earlier results, waited or not
        buf[...] = x
        handles.append(c.submit({"x": buf}))
    for i in order[N // 2:] + list(range(N, 2 * N)):
        _close(handles[i].result(), expected[i])
    for i, got in first.items():
        _close(handles[i].wait(), got)
        assert handles[i].result() is handles[i].wait()  # one Outputs per handle
    assert all(h.done() for h in handles)
    assert handles[0].wait().names == c.output_names


def test_done_turns_true_without_wait(device):
    c = _compiled(device)
    h = c.submit({"x": np.ones((8, 16), np.float32)})
    deadline = time.monotonic() + 60
    while not h.done():
        assert time.monotonic() < deadline, "done() never turned true"
        time.sleep(0.001)
    _close(h.wait(), c.run({"x": np.ones((8, 16), np.float32)}))


def test_bad_inputs_raise_at_submit(device):
    c = _compiled(device)
    good = np.zeros((8, 16), np.float32)
    with pytest.raises(InputError, match=r"expected dims \[8, 16\], got \[8, 15\]"):
        c.submit({"x": np.zeros((8, 15), np.float32)})
    with pytest.raises(InputError, match="expected dtype f32, got f64"):
        c.submit({"x": good.astype(np.float64)})
    with pytest.raises(InputError, match="missing input"):
        c.submit({})
    with pytest.raises(InputError, match="no input named 'y'"):
        c.submit({"x": good, "y": good})
    with pytest.raises(InputTypeError):
        c.submit(good)
    fresh = Session(device).compile(_graph())
    with pytest.raises(ParamError, match="never set"):
        fresh.submit({"x": good})
    _close(c.submit({"x": good}).wait(), c.run({"x": good}))  # still usable


def test_async_pipeline_means_submit_queues(device):
    """A backend claiming async_pipeline returns from submit before the run is done: of
    several back-to-back submits of a heavy graph, some are still pending right after."""
    # Heavy for the device: on a real GPU a 512-wide layer takes microseconds, less than
    # one submit's own host time, so there it is a chain of 2048-wide layers instead.
    on_gpu = device == "cuda" or (device == "tpu" and os.environ.get("RLX_TPU_PLATFORM") == "gpu")
    n, rows, depth = (2048, 2048, 16) if on_gpu else (512, 256, 1)
    c = _compiled(device, _graph(n, rows=rows, depth=depth))
    x = np.ones((rows, n), np.float32)
    c.run({"x": x})  # compiled, warm
    handles = [c.submit({"x": x}) for _ in range(4)]
    pending = [not h.done() for h in handles]
    results = [h.wait() for h in handles]
    if "async_pipeline" in c.capabilities:
        assert any(pending), "every submit was done on return: nothing was queued"
    else:
        assert not any(pending), "a backend without async_pipeline runs at submit"
    for r in results[1:]:
        _close(r, results[0])


def test_async_pipeline_is_claimed_where_it_queues(device):
    """Every device but cpu queues its runs -- except a wgpu executable on a software
    adapter (lavapipe: the device is the host's CPU, and each submit waited for the queue)."""
    from rlx_core.select.devices import software_detail
    c = _compiled(device)
    gpu_info = getattr(getattr(c.executable, "gpu", None), "info", None)
    software_gpu = gpu_info is not None and bool(software_detail(gpu_info))
    assert ("async_pipeline" in c.capabilities) == (device != "cpu" and not software_gpu), sorted(c.capabilities)


# --- a failure inside the run surfaces at wait() -------------------------------------------
def _gather_graph():
    g = Graph("gather")
    x = g.input("x", Shape((4, 3), "f32"))
    i = g.input("i", Shape((2,), "i32"))
    g.set_outputs([g.gather(x, i, axis=0)])
    return g


def test_cpu_run_error_surfaces_at_wait():
    """cpu runs at submit, but keeps the run's error for wait(), as a queued run's."""
    c = Session("cpu").compile(_gather_graph())
    x = np.ones((4, 3), np.float32)
    h = c.submit({"x": x, "i": np.array([0, 9], np.int32)})  # 9 is out of range: the kernel raises
    assert h.done()
    for _ in range(2):  # every wait says it
        with pytest.raises(InputError, match="index 9 is out of range"):
            h.wait()
    np.testing.assert_array_equal(c.submit({"x": x, "i": np.array([1, 2], np.int32)}).wait()[0], x[:2])


def test_tpu_queued_run_error_surfaces_at_wait(fresh_registry, monkeypatch):
    """A host callback that raises inside the XLA program: the error comes from the
    device's queue, after submit returned, and is raised by wait()."""
    pytest.importorskip("rlx_tpu")
    jax = pytest.importorskip("jax")
    import os

    from rlx_core import CustomOp, register_custom_op
    from rlx_core.runtime import hookimpl, register_backends, registry
    if not os.environ.get("RLX_TPU_PLATFORM"):
        monkeypatch.setenv("RLX_TPU_PLATFORM", "cpu")

    def fail(x):
        if float(np.asarray(x).sum()) < 0:
            raise ValueError("the host callback refused a negative input")
        return np.asarray(x)

    op = CustomOp(kind="test.stream_check", rule=lambda a, x: x, reference=lambda x: x)
    register_custom_op(op)

    class Plugin:
        @hookimpl
        def rlx_custom_ops(self):
            return [op]

        @hookimpl
        def rlx_op_kernels(self, backend):
            if backend != "tpu":
                return None
            return {op.kind: lambda x: jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x)}

    plugin = Plugin()
    register_backends(plugin)
    try:
        g = Graph("checked")
        x = g.input("x", Shape((4,), "f32"))
        g.set_outputs([g.op(op.kind, x) * 2.0])
        c = Session("tpu").compile(g)
        bad = c.submit({"x": -np.ones(4, np.float32)})
        good = c.submit({"x": np.ones(4, np.float32)})
        with pytest.raises(Exception, match="refused a negative input"):
            bad.wait()
        np.testing.assert_array_equal(good.wait()[0], np.full(4, 2.0, np.float32))
    finally:
        registry().pm.unregister(plugin)


def test_submit_errors_are_rlx_errors(device):
    c = _compiled(device)
    with pytest.raises(RlxError):
        c.submit({"x": "not an array"})

"""BLAS calls: one OpenBLAS thread during runs (restored after), GEMMs shared with a
helper thread where that measured faster."""
import numpy as np
import pytest

from rlx_core import CompileOptions, evaluate, models
from rlx_cpu import threads
from rlx_cpu.executable import CpuExecutable
from rlx_cpu.kernels import Call
from rlx_cpu.parallel import matmul_blocks, shared_work

threadpoolctl = pytest.importorskip("threadpoolctl")
control = threads.blas_threads()
needs_openblas = pytest.mark.skipif(control is None, reason="numpy's BLAS is not a multi-threaded OpenBLAS")


def _openblas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]


def _mlp_executable(extra=None):
    g, params = models.mlp(batch=64, sizes=(64, 256, 4))  # the first matmul is big enough to plan
    exe = CpuExecutable(g, CompileOptions(), extra or {})
    for name, value in params.items():
        exe.set_param(name, value)
    return exe, g, params


def _matmul_call(m=64, k=64, n=256):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    return Call(np.matmul, (a, b), {"out": np.empty((m, n), np.float32)})


def test_shared_blocks_compute_the_product():
    call = _matmul_call(m=8, k=16, n=300)
    blocks = matmul_blocks(*call.args, call.kwargs["out"])
    assert len(blocks) == 4
    for _ in range(3):
        call.kwargs["out"][:] = np.nan
        shared_work().run(blocks)
        np.testing.assert_allclose(call.kwargs["out"], call.args[0] @ call.args[1], rtol=1e-5)
    assert matmul_blocks(np.ones((2, 3)), np.ones((3, 64)), np.empty((2, 64))) is None  # too narrow


@needs_openblas
@pytest.mark.parametrize("decision", ["single", "shared"])
def test_runs_are_correct_and_restore_openblas_threads(monkeypatch, decision):
    monkeypatch.setattr(threads._decisions, "get", lambda key: decision)
    exe, g, params = _mlp_executable()
    calls = [c for _, cs in exe._calls(exe._bind_views(exe._buffers)) for c in cs if c.threads is not None]
    assert calls and all(c.threads == 1 for c in calls)
    assert any(c.fn == shared_work().run for c in calls) == (decision == "shared")
    inputs = models.example_inputs(g)
    before = _openblas_threads()
    np.testing.assert_allclose(exe.run(inputs)[0], evaluate(g, inputs, params)[0], rtol=1e-4, atol=1e-5)
    assert _openblas_threads() == before


@needs_openblas
def test_the_default_is_restored_when_a_run_fails():
    def broken(x):
        raise ValueError("kernel failure")
    exe, g, _ = _mlp_executable({"relu": broken})
    before = _openblas_threads()
    with pytest.raises(ValueError, match="kernel failure"):
        exe.run(models.example_inputs(g))
    assert _openblas_threads() == before


@needs_openblas
def test_choice_is_measured_once_and_stored(monkeypatch):
    stored = {}
    monkeypatch.setattr(threads._decisions, "get", stored.get)
    monkeypatch.setattr(threads._decisions, "set", stored.__setitem__)
    call = _matmul_call()
    first = threads.plan_blas_call(call)
    assert list(stored.values()) in (["single"], ["shared"])
    monkeypatch.setattr(threads, "_shared_is_faster", lambda *_: pytest.fail("measured twice"))
    assert threads.plan_blas_call(call).fn == first.fn


@needs_openblas
def test_environment_overrides(monkeypatch):
    monkeypatch.setattr(threads, "_shared_is_faster", lambda *_: pytest.fail("measured"))
    call = _matmul_call()
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "openblas")
    assert threads.plan_blas_call(call) == call
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "1")
    assert threads.plan_blas_call(call) == call._replace(threads=1)


def test_tiny_matmuls_are_left_to_openblas(monkeypatch):
    monkeypatch.setattr(threads, "_shared_is_faster", lambda *_: pytest.fail("measured"))
    call = _matmul_call(m=4, k=16, n=64)
    assert threads.plan_blas_call(call) == call

"""BLAS thread counts: chosen per call, switched during a run, restored after it."""
import numpy as np
import pytest

from rlx_core import CompileOptions, models
from rlx_cpu import threads
from rlx_cpu.executable import CpuExecutable

threadpoolctl = pytest.importorskip("threadpoolctl")
control = threads.blas_threads()
pytestmark = pytest.mark.skipif(control is None, reason="numpy's BLAS is not a multi-threaded OpenBLAS")


def _openblas_threads() -> int:
    return next(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas")


def _mlp_executable(extra=None):
    g, params = models.mlp(batch=4, sizes=(16, 8, 4))
    exe = CpuExecutable(g, CompileOptions(), extra or {})
    for name, value in params.items():
        exe.set_param(name, value)
    return exe, models.example_inputs(g)


def test_one_thread_runs_restore_the_default(monkeypatch):
    monkeypatch.setattr(threads._decisions, "get", lambda key: "1")
    exe, inputs = _mlp_executable()
    assert {c.threads for _, calls in exe._calls(exe._bind_views(exe._buffers)) for c in calls} >= {1}
    exe.run(inputs)
    assert _openblas_threads() == control.default


def test_the_default_is_restored_when_a_run_fails(monkeypatch):
    monkeypatch.setattr(threads._decisions, "get", lambda key: "1")

    def broken(x):
        raise ValueError("kernel failure")
    exe, inputs = _mlp_executable({"relu": broken})
    with pytest.raises(ValueError, match="kernel failure"):
        exe.run(inputs)
    assert _openblas_threads() == control.default


def test_choice_is_measured_once_and_stored(monkeypatch):
    stored = {}
    monkeypatch.setattr(threads._decisions, "get", stored.get)
    monkeypatch.setattr(threads._decisions, "set", stored.__setitem__)
    a, b, out = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32), np.empty((64, 64), np.float32)
    first = threads.choose_threads(np.matmul, (a, b), {"out": out})
    assert first in (1, control.default) and list(stored.values()) == [str(first)]
    monkeypatch.setattr(threads, "_measure", lambda *_: pytest.fail("measured twice"))
    assert threads.choose_threads(np.matmul, (a, b), {"out": out}) == first


def test_environment_turns_the_choice_off(monkeypatch):
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "default")
    monkeypatch.setattr(threads, "_measure", lambda *_: pytest.fail("measured"))
    a = np.ones((8, 8), np.float32)
    assert threads.choose_threads(np.matmul, (a, a), {"out": np.empty_like(a)}) == control.default


def test_environment_can_force_a_count(monkeypatch):
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "1")
    monkeypatch.setattr(threads, "_measure", lambda *_: pytest.fail("measured"))
    a = np.ones((8, 8), np.float32)
    assert threads.choose_threads(np.matmul, (a, a), {"out": np.empty_like(a)}) == 1

"""BLAS calls: a plan per machine state (quiet: OpenBLAS's threads / one thread / shared
blocks, as stored, else OpenBLAS's threads until the background planner has measured
them; loaded: one thread), OpenBLAS's counts restored after runs, stalls reported, runs
that keep the faster of two plans, the machine-load sensor. The plan choices are
tested on fixed figures in place of measurements."""
import os
import time

import numpy as np
import pytest

from rlx_core import CompileOptions, evaluate, models
from rlx_cpu import adaptive, cache, load, planner, threads
from rlx_cpu.executable import CpuExecutable, straight_line
from rlx_cpu.kernels import Call
from rlx_cpu.parallel import matmul_blocks, shared_work

threadpoolctl = pytest.importorskip("threadpoolctl")
control = threads.blas_threads()
needs_openblas = pytest.mark.skipif(control is None, reason="numpy's BLAS is not a multi-threaded OpenBLAS")


class _FixedLoad:
    """A machine-load sensor stuck in one state, counting reported stalls."""

    def __init__(self, state):
        self.current, self.stalls = state, 0

    def state(self):
        return self.current

    def report_stall(self):
        self.stalls += 1


@pytest.fixture
def sensor(monkeypatch):
    """The machine-load sensor compiles see: quiet (and settled) until a test says otherwise."""
    fixed = _FixedLoad(load.QUIET)
    fixed.settled = True
    monkeypatch.setattr(planner, "machine_load", lambda: fixed)
    return fixed


@pytest.fixture
def stored(monkeypatch, tmp_path, sensor):
    """The BLAS plans' decisions file, in a folder of the test's own."""
    monkeypatch.setattr(cache, "kernel_dir", lambda: tmp_path)
    decisions = cache.Decisions()
    monkeypatch.setattr(threads, "_decisions", decisions)
    return decisions


class _Machine:
    """Whether the machine is idle, as the background planner sees it (a test sets it)."""

    def __init__(self):
        self.idle = [True]  # consumed one answer per check; the last one sticks

    def __call__(self):
        return self.idle.pop(0) if len(self.idle) > 1 else self.idle[0]


@pytest.fixture
def machine(monkeypatch):
    """A planner without a thread: the test makes its attempts."""
    idle = _Machine()
    monkeypatch.setattr(planner.planner, "made", (os.getpid(),
                                              planner.Planner(idle, settle_s=0.0, background=False)))
    return idle


def _openblas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]


def _mlp_executable(extra=None):
    g, params = models.mlp(batch=64, sizes=(64, 256, 4))  # the first matmul is big enough to plan
    exe = CpuExecutable(g, CompileOptions(), extra or {})
    for name, value in params.items():
        exe.set_param(name, value)
    return exe, g, params


def _matmul_call(m=64, k=64, n=256, batch=()):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(batch + (m, k)).astype(np.float32)
    b = rng.standard_normal(batch + (k, n)).astype(np.float32)
    return Call(np.matmul, (a, b), {"out": np.empty(batch + (m, n), np.float32)})


@pytest.mark.parametrize("shape", [dict(m=8, k=16, n=300), dict(m=8, k=16, n=20, batch=(3, 2))])
def test_shared_blocks_compute_the_product(shape):
    call = _matmul_call(**shape)
    a, b = call.args
    blocks = matmul_blocks(a, b, call.kwargs["out"])
    assert len(blocks) == (4 if not shape.get("batch") else 6)
    for _ in range(3):
        call.kwargs["out"][:] = np.nan
        shared_work().run(blocks)
        np.testing.assert_allclose(call.kwargs["out"], a @ b, rtol=1e-5)


def test_blocks_of_broadcast_batches():
    a = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    b = np.arange(5 * 6, dtype=np.float64).reshape(5, 6) / 7
    out = np.empty((2, 3, 4, 6))
    shared_work().run(matmul_blocks(a, b[None], out))
    np.testing.assert_allclose(out, a @ b)
    assert matmul_blocks(np.ones((2, 3)), np.ones((3, 64)), np.empty((2, 64))) is None  # too narrow
    assert matmul_blocks(np.ones((1, 2, 3)), np.ones((1, 3, 4)), np.empty((1, 2, 4))) is None  # one entry


@needs_openblas
@pytest.mark.parametrize("mode", threads.MODES)
def test_runs_are_correct_and_restore_openblas_threads(monkeypatch, stored, machine, mode):
    monkeypatch.setattr(threads._decisions, "get", lambda key: f"{mode} 1e-4")
    exe, g, params = _mlp_executable()
    planned = [c for _, cs in exe._runs._planned(lambda c: threads.plan_blas_call(c, load.QUIET)) for c in cs
               if c.threads is not None]
    assert planned and all(c.threads == (threads.OWN_THREADS if mode == "openblas" else 1) for c in planned)
    assert any(c.fn == shared_work().run for c in planned) == (mode == "shared")
    assert all((c.stall_after is not None) == (mode == "openblas") for c in planned)
    inputs = models.example_inputs(g)
    before = _openblas_threads()
    for _ in range(3):
        np.testing.assert_allclose(exe.run(inputs)[0], evaluate(g, inputs, params)[0], rtol=1e-4, atol=1e-5)
    assert _openblas_threads() == before


@needs_openblas
def test_the_default_is_restored_when_a_run_fails(stored, machine):
    def broken(x):
        raise ValueError("kernel failure")
    exe, g, _ = _mlp_executable({"relu": broken})
    run = straight_line(exe._runs._planned(threads.single_threaded))  # switches OpenBLAS to one thread
    before = _openblas_threads()
    with pytest.raises(ValueError, match="kernel failure"):
        run(models.example_inputs(g))
    assert _openblas_threads() == before


def _fixed_times(openblas, single, shared, stall=None):
    times = {"openblas": [openblas] * 7, "single": [single] * 7, "shared": [shared] * 7}
    if stall is not None:
        times["openblas"][-1] = stall
    return lambda ways, _: {mode: t for mode, t in times.items() if mode in ways}


@needs_openblas
def test_a_compile_never_measures_and_the_background_measurement_is_stored(monkeypatch, stored, machine):
    monkeypatch.setattr(threads, "measure", lambda *_: pytest.fail("measured during a compile"))
    call = _matmul_call()
    first = threads.plan_blas_call(call, load.QUIET)
    assert first.threads == threads.OWN_THREADS and first.stall_after is not None  # the default
    (key,) = planner.planner().pending()
    assert stored.get(key) is None
    monkeypatch.setattr(threads, "measure", _fixed_times(1e-4, 1e-4, 0.5e-4))
    assert planner.planner().attempt()  # the machine is idle: measured and stored
    assert stored.get(key) == "shared 5.000e-05" and not stored.provisional(key)
    assert not planner.planner().pending()
    monkeypatch.setattr(threads, "measure", lambda *_: pytest.fail("measured twice"))
    assert threads.plan_blas_call(call, load.QUIET).fn == shared_work().run  # the next compile uses it
    loaded = threads.plan_blas_call(call, load.LOADED)
    assert loaded.fn is np.matmul and loaded.threads == 1
    assert not planner.planner().pending()


@needs_openblas
def test_the_background_measurement_runs_on_arrays_of_its_own(monkeypatch, stored, machine):
    seen = []
    monkeypatch.setattr(threads, "measure", lambda ways, _: seen.append(ways) or _fixed_times(1, 2, 2)(ways, _))
    call = _matmul_call(m=64, k=128, n=256)
    a, b = call.args
    call = call._replace(args=(a, np.asfortranarray(b)))  # strides are part of the layout
    threads.plan_blas_call(call, load.QUIET)
    assert planner.planner().attempt()
    sample = seen[0]["single"]
    assert [x.strides for x in (*sample.args, sample.kwargs["out"])] == \
        [x.strides for x in (*call.args, call.kwargs["out"])]
    assert not any(np.shares_memory(x, y) for x in (*sample.args, sample.kwargs["out"])
                   for y in (*call.args, call.kwargs["out"]))


@needs_openblas
@pytest.mark.parametrize("idle, times", [
    ([False], _fixed_times(0.5e-4, 1e-4, 0.9e-4)),  # something runs (another process, another runtime's pool)
    ([True, False], _fixed_times(0.5e-4, 1e-4, 0.9e-4)),  # ... from during the measurement on
    ([True], _fixed_times(1e-4, 3e-4, 2e-4, stall=0.5))])  # OpenBLAS's threads stalled
def test_a_measurement_on_a_busy_machine_is_not_stored(monkeypatch, stored, machine, idle, times):
    monkeypatch.setattr(threads, "measure", times)
    machine.idle = idle
    threads.plan_blas_call(_matmul_call(), load.QUIET)
    assert not planner.planner().attempt()
    assert planner.planner().pending() and not _stored_values(stored)  # still queued, nothing stored


def _stored_values(decisions):
    return {k: decisions.get(k) for k in (decisions._values or {})}


@pytest.mark.parametrize("medians, decided", [
    ({"openblas": 0.95e-4, "single": 1e-4, "shared": 0.99e-4}, "any 1.000e-04"),  # as fast: keep the count
    ({"openblas": 1.2e-4, "single": 1e-4, "shared": 0.99e-4}, "single 1.000e-04"),
    ({"openblas": 0.8e-4, "single": 1e-4, "shared": 0.99e-4}, "openblas 8.000e-05"),
    ({"openblas": 0.8e-4, "single": 1e-4, "shared": 0.5e-4}, "shared 5.000e-05"),
    ({"single": 1e-4, "shared": 0.95e-4}, "single 1.000e-04")])
def test_a_multi_core_way_must_clearly_win(medians, decided):
    assert threads.choose(medians) == decided


@needs_openblas
def test_a_stored_one_thread_plan_is_checked_against_two_threads_at_run_time(monkeypatch, stored, machine):
    # The MLP: a one-thread choice stored by a measurement that other work spoiled.
    monkeypatch.setattr(threads._decisions, "get", lambda key: "single 5e-4")
    exe, _, _ = _mlp_executable()
    quiet, loaded = exe._runs.get(load.QUIET), exe._runs.get(load.LOADED)
    assert isinstance(quiet, adaptive.AdaptiveRun) and not isinstance(loaded, adaptive.AdaptiveRun)
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "single")  # forced: nothing else is tried
    exe, _, _ = _mlp_executable()
    assert not isinstance(exe._runs.get(load.QUIET), adaptive.AdaptiveRun)


@needs_openblas
def test_environment_overrides(monkeypatch, stored, machine):
    monkeypatch.setattr(threads, "measure", lambda *_: pytest.fail("measured"))
    call = _matmul_call()
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "openblas")
    assert threads.plan_blas_call(call, load.LOADED).threads == threads.OWN_THREADS
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "1")
    assert threads.plan_blas_call(call, load.QUIET).threads == 1
    assert threads.multi_threaded(call).threads == 1
    monkeypatch.setenv("RLX_CPU_BLAS_THREADS", "shared")
    assert threads.plan_blas_call(call, load.QUIET).fn == shared_work().run
    assert not planner.planner().pending()


def test_tiny_matmuls_are_left_to_openblas(monkeypatch):
    monkeypatch.setattr(threads, "measure", lambda *_: pytest.fail("measured"))
    call = _matmul_call(m=4, k=16, n=64)
    assert threads.plan_blas_call(call, load.QUIET) is call
    assert threads.single_threaded(call) is call


def test_a_call_past_its_stall_limit_is_reported(monkeypatch):
    sensor = _FixedLoad(load.QUIET)
    monkeypatch.setattr("rlx_cpu.executable.machine_load", lambda: sensor)
    slow = Call(time.sleep, (0.002,), stall_after=0.001)
    fast = Call(time.sleep, (0.0,), stall_after=1.0)
    straight_line([("a", [fast])])({})
    assert sensor.stalls == 0
    straight_line([("a", [fast, slow])])({})
    assert sensor.stalls == 1


# --- the machine-load sensor -------------------------------------------------------------------
class _FakeProc:
    """A /proc/stat file and a process CPU clock (in ticks) that tests advance."""

    def __init__(self, tmp_path):
        self.path = tmp_path / "stat"
        self.busy = self.own = 0
        self.write()

    def write(self):
        # user nice system idle iowait irq softirq steal: busy ticks spread over user and steal
        self.path.write_text(f"cpu  {self.busy - self.busy // 4} 0 0 1000 7 0 0 {self.busy // 4} 0 0\ncpu0 ...\n")

    def sensor(self):
        return load.MachineLoad(str(self.path), lambda: self.own)


def test_load_follows_other_processes_with_hysteresis(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(load.time, "monotonic", lambda: clock[0])
    proc = _FakeProc(tmp_path)
    sensor = proc.sensor()
    ticks = load._TICKS_PER_S

    def after(seconds, busy_cores, own_cores):
        clock[0] += seconds
        proc.busy += round(busy_cores * ticks * seconds)
        proc.own += round(own_cores * ticks * seconds)
        proc.write()
        return sensor.state()

    assert sensor.state() == load.QUIET
    assert after(0.3, busy_cores=1.9, own_cores=1.9) == load.QUIET  # our own threads do not count
    assert after(0.3, busy_cores=2.0, own_cores=1.0) == load.LOADED
    assert sensor.others == pytest.approx(1.0, abs=0.05)
    assert after(0.3, busy_cores=1.25, own_cores=1.0) == load.LOADED  # between the thresholds: kept
    assert after(0.3, busy_cores=1.0, own_cores=1.0) == load.QUIET
    assert after(0.1, busy_cores=2.0, own_cores=0.0) == load.QUIET  # within the period: not re-read
    assert after(5.0, busy_cores=2.0, own_cores=0.0) == load.QUIET  # a stale window: a new one starts
    assert after(0.3, busy_cores=2.0, own_cores=0.0) == load.LOADED


def test_two_stalls_in_quick_succession_hold_the_loaded_state(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(load.time, "monotonic", lambda: clock[0])
    sensor = _FakeProc(tmp_path).sensor()
    sensor.report_stall()
    assert sensor.state() == load.QUIET  # a lone slow call
    clock[0] += load.STALL_PAIR_S + 0.1
    sensor.report_stall()
    assert sensor.state() == load.QUIET  # too long after the first
    clock[0] += 0.1
    sensor.report_stall()
    assert sensor.state() == load.LOADED
    for _ in range(int(load.STALL_HOLD_S / 0.3)):  # quiet windows, but within the hold
        clock[0] += 0.3
        assert sensor.state() == load.LOADED
    clock[0] += 0.3
    assert sensor.state() == load.QUIET


def test_without_proc_the_state_is_quiet_unless_stalled(tmp_path):
    sensor = load.MachineLoad(str(tmp_path / "missing"))
    assert sensor.state() == load.QUIET
    sensor.report_stall()
    sensor.report_stall()
    assert sensor.state() == load.LOADED


# --- adaptive runs -----------------------------------------------------------------------------
def _busy(seconds):
    def run(feeds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
        feeds.append(seconds)
    return run


def test_an_adaptive_run_moves_to_the_faster_plan_and_back(monkeypatch):
    monkeypatch.setattr(adaptive, "PROBE_EVERY_S", 0.0)
    slow, fast = [_busy(2e-3), _busy(2e-4)]
    run = adaptive.AdaptiveRun([slow, fast])
    done = []
    for _ in range(3 * (adaptive.PROBE_RUNS + 1)):
        run(done)
    assert run.current == 1 and 2e-3 in done  # it ran the first plan, then chose the second
    run.plans = [fast, slow]  # the machine changed: plan 1 is now the slow one
    for _ in range(6 * (adaptive.PROBE_RUNS + 1)):
        run(done)
    assert run.current == 0

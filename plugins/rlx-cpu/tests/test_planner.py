"""Measured choices: kept per machine fingerprint, provisional when measured on a machine
not known to be quiet, re-measured in the background only while the whole machine
(this process's other threads included) is idle. No timing: measurements are fakes
that return fixed choices, and the machine's idleness is set by the test."""
import os

import pytest

from rlx_cpu import cache, load, planner


class _Sensor:
    def __init__(self, state=load.QUIET, settled=True):
        self.current, self.settled = state, settled

    def state(self):
        return self.current


@pytest.fixture
def decisions(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "kernel_dir", lambda: tmp_path)
    return cache.Decisions()


@pytest.fixture
def idle(monkeypatch):
    """The planner's view of the machine: ``idle[0]`` says whether it is idle."""
    answer = [True]
    monkeypatch.setattr(planner.planner, "made", (os.getpid(), planner.Planner(lambda: answer[0], settle_s=0.0,
                                                                            background=False)))
    return answer


def _counting(value):
    calls = []

    def measure():
        calls.append(value)
        return value
    return measure, calls


def test_decisions_are_kept_per_machine_and_marked_provisional(decisions, tmp_path, monkeypatch):
    decisions.set("a", "direct", provisional=True)
    decisions.set("b", "nchw")
    (path,) = tmp_path.glob("decisions-*.json")
    assert path.name == f"decisions-{cache.machine_fingerprint()}.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    fresh = cache.Decisions()  # another process: reads the file
    assert (fresh.get("a"), fresh.provisional("a")) == ("direct", True)
    assert (fresh.get("b"), fresh.provisional("b")) == ("nchw", False)
    assert fresh.get("c") is None and not fresh.provisional("c")
    monkeypatch.setattr(cache, "machine_fingerprint", lambda: "another-cpu")
    assert cache.Decisions().get("b") is None  # another machine measures for itself


def test_a_compile_measures_a_missing_choice_and_stores_it(decisions, idle, monkeypatch):
    monkeypatch.setattr(planner, "machine_load", lambda: _Sensor())
    measure, calls = _counting("direct")
    assert planner.choice(decisions, "k", measure) == "direct"
    assert planner.choice(decisions, "k", measure) == "direct"
    assert calls == ["direct"] and not decisions.provisional("k") and not planner.planner().pending()


@pytest.mark.parametrize("sensor", [_Sensor(load.LOADED), _Sensor(settled=False)])
def test_a_choice_measured_on_a_machine_not_known_quiet_is_provisional(decisions, idle, monkeypatch, sensor):
    # settled=False: the process's first window is not judged yet (the state is a guess).
    monkeypatch.setattr(planner, "machine_load", lambda: sensor)
    measure, calls = _counting("nchw")
    assert planner.choice(decisions, "k", measure) == "nchw"
    assert decisions.provisional("k") and planner.planner().pending() == ["k"]
    idle[0] = False  # the background planner waits while anything runs
    assert not planner.planner().attempt() and calls == ["nchw"]
    idle[0] = True
    assert planner.planner().attempt()
    assert calls == ["nchw", "nchw"] and not decisions.provisional("k") and not planner.planner().pending()
    # the next process uses it without measuring, however loaded the machine is
    assert planner.choice(cache.Decisions(), "k", lambda: pytest.fail("measured")) == "nchw"


def test_a_default_is_used_and_the_choice_measured_in_the_background(decisions, idle):
    measure, calls = _counting("single 1e-4")
    assert planner.choice(decisions, "k", measure, default="openblas 1e-3") == "openblas 1e-3"
    assert not calls and decisions.get("k") is None
    assert planner.planner().attempt()
    assert planner.choice(decisions, "k", measure, default="openblas 1e-3") == "single 1e-4"


def test_an_unusable_stored_choice_is_measured_again(decisions, idle, monkeypatch):
    monkeypatch.setattr(planner, "machine_load", lambda: _Sensor())
    decisions.set("k", "a-route-this-build-lacks")
    assert planner.choice(decisions, "k", lambda: "nchw", valid={"nchw", "direct"}.__contains__) == "nchw"


def test_a_failing_background_measurement_is_dropped(decisions, idle):
    def broken():
        raise RuntimeError("no")
    planner.choice(decisions, "k", broken, default="x")
    assert not planner.planner().attempt() and not planner.planner().pending()
    assert decisions.get("k") is None


def test_idle_machine_counts_every_process_this_one_included(tmp_path):
    stat = tmp_path / "stat"
    ticks = load._TICKS_PER_S
    busy = [0]

    def write():
        stat.write_text(f"cpu  {busy[0]} 0 0 1000 0 0 0 0 0 0\n")

    def sleep_while(cores):
        def sleep(seconds):
            busy[0] += round(cores * ticks * seconds)
            write()
        return sleep
    write()
    assert load.idle_machine(1.0, str(stat), sleep_while(0.05))
    assert not load.idle_machine(1.0, str(stat), sleep_while(0.5))  # e.g. another runtime's pool spinning
    assert load.idle_machine(1.0, str(tmp_path / "missing"), sleep_while(2.0))  # nothing says otherwise


def test_the_sensor_is_settled_only_once_a_window_is_judged(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(load.time, "monotonic", lambda: clock[0])
    stat = tmp_path / "stat"
    stat.write_text("cpu  0 0 0 1000 0 0 0 0 0 0\n")
    sensor = load.MachineLoad(str(stat), lambda: 0)
    assert sensor.state() == load.QUIET and not sensor.settled
    clock[0] += 0.3
    assert sensor.state() == load.QUIET and sensor.settled

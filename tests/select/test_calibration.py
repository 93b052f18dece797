"""Calibration: measuring, the JSON cache (atomic, validated, re-measured when corrupt or
stale), the plugin hook, and the figures the cost model gets."""
import json
import logging
import os

import pytest

from rlx_core.errors import PluginError
from rlx_core.runtime import hookimpl
from rlx_core.runtime.registry import register_backends, registry
from rlx_core.select import calibration as cal
from rlx_core.select import calibrate, calibration_path, device_figures, load_calibration, measure_backend

SEED_FIELDS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns")


@pytest.fixture
def fake_measure(monkeypatch):
    """Replace the generic measurement with a counter returning fixed figures."""
    calls = []

    def measure(backend, device=None, **kw):
        calls.append(backend.name)
        return {"sgemm_gflops": 500.0, "memory_bw_gbps": 50.0, "roundtrip_overhead_ns": 2000.0,
                "dispatch_overhead_ns": 300.0, "vector_gflops": 40.0, "kind_ns_per_element": {"tanh": [0.5, 1.0]}}

    monkeypatch.setattr(cal, "measure_backend", measure)
    return calls


def test_cpu_calibration_through_the_plugin_hook(tmp_path):
    """The seed's figures plus per-kind costs, the op kinds timed in priority order until
    the time budget runs out -- at least the first MIN_KINDS_TIMED, however loaded the
    host (how long it takes is measured by `rlx calibrate`, not here; how many kinds fit
    the budget is load-dependent, so only the structure is checked)."""
    calib = calibrate("cpu")
    path = calibration_path("cpu", "cpu")
    assert path.parent == tmp_path / "cache" / "rlx"
    assert path.name == f"cpu-calib-cpu-{calib.fingerprint}.json"
    data = json.loads(path.read_text())
    for name in SEED_FIELDS + ("dispatch_overhead_ns", "vector_gflops"):
        assert data[name] > 0, name
    assert data["plugin_version"] == next(p.version for p in registry().plugins if p.name == "cpu")
    order = cal.probe_order(registry().backend("cpu").supported_ops())
    timed = list(calib.kind_dispatch_ns)
    assert len(timed) >= cal.MIN_KINDS_TIMED and timed == order[:len(timed)]
    assert set(calib.kind_ns_per_element) <= set(timed)
    assert 0.1 < calib.sgemm_gflops < 1e5  # numpy BLAS on some CPU: GFLOP/s, not FLOP/s
    assert device_figures("cpu").source == "calibrated"


class _Clock:
    """A clock for measure_kind_costs that moves only when the test says."""

    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def test_kind_budget_is_kept_with_an_injected_clock(fakes):
    """Which kinds get timed depends on the clock it is given, not on the host's load."""
    from rlx_core.runtime import Device
    backend = registry().backend("metal")  # the fake that runs add and mul only
    order = cal.probe_order(backend.supported_ops())
    assert order == ["add", "mul"]
    spent = _Clock(now=10.0)  # the deadline (1.0) passed before the first kind
    dispatch, per_element = cal.measure_kind_costs(backend, Device("metal"), 1.0, 1.0, clock=spent, min_kinds=1)
    assert list(dispatch) == ["add"] and list(per_element) == ["add"]  # the minimum, whatever the clock says
    dispatch, _ = cal.measure_kind_costs(backend, Device("metal"), 1.0, 1.0, clock=spent, min_kinds=0)
    assert dispatch == {}
    dispatch, per_element = cal.measure_kind_costs(backend, Device("metal"), 1.0, 1.0, clock=_Clock(0.0))
    assert list(dispatch) == order and all(len(v) == 2 and min(v) > 0 for v in per_element.values())


def test_cache_is_used_until_forced(fakes, fake_measure):
    first = calibrate("gpu")
    again = calibrate("gpu")
    assert fake_measure == ["fake-gpu"] and again == first
    cal.clear_memo()
    assert calibrate("gpu") == first and fake_measure == ["fake-gpu"]  # read back from the file
    calibrate("gpu", force=True)
    assert fake_measure == ["fake-gpu", "fake-gpu"]


def _corrupt_cases():
    def edit(**changes):
        def apply(data):
            data.update(changes)
            return json.dumps(data)
        return apply

    def drop(name):
        def apply(data):
            del data[name]
            return json.dumps(data)
        return apply

    return {
        "not json": lambda data: "{sgemm_gflops: fast",
        "truncated": lambda data: json.dumps(data)[:40],
        "a list": lambda data: json.dumps([data]),
        "missing field": drop("memory_bw_gbps"),
        "negative figure": edit(memory_bw_gbps=-3.0),
        "zero figure": edit(roundtrip_overhead_ns=0),
        "nan figure": edit(sgemm_gflops=float("nan")),
        "infinite figure": edit(sgemm_gflops=float("inf")),  # json writes Infinity, and reads it back
        "implausible figure": edit(sgemm_gflops=1e308),
        "implausible dispatch table": edit(kind_dispatch_ns={"add": 1e300}),
        "string figure": edit(vector_gflops="fast"),
        "bad kind table": edit(kind_ns_per_element={"tanh": [1.0]}),
        "bad dispatch table": edit(kind_dispatch_ns={"add": -1.0}),
        "dispatch table not an object": edit(kind_dispatch_ns=[1.0]),
        "other host": edit(fingerprint="0123456789abcdef"),
        "old format": edit(format=0),
        "other plugin version": edit(plugin_version="9.9.9"),
        "other backend": edit(backend="someone-else"),
        "other thread settings": edit(threads={"OMP_NUM_THREADS": "1"}),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases()))
def test_corrupt_or_stale_files_are_remeasured(fakes, fake_measure, case, caplog):
    caplog.set_level(logging.INFO, logger="rlx.select.calibration")
    calibrate("gpu")
    path = calibration_path("fake-gpu", "gpu")
    path.write_text(_corrupt_cases()[case](json.loads(path.read_text())))
    cal.clear_memo()
    assert load_calibration("gpu") is None
    calib = calibrate("gpu")
    assert fake_measure == ["fake-gpu", "fake-gpu"]
    assert json.loads(path.read_text())["memory_bw_gbps"] == calib.memory_bw_gbps == 50.0
    assert any("re-measuring" in r.message for r in caplog.records)


def test_writes_are_atomic_and_leave_no_temporaries(fakes, fake_measure):
    calibrate("gpu")
    calibrate("gpu", force=True)
    files = os.listdir(calibration_path("fake-gpu", "gpu").parent)
    assert files == [calibration_path("fake-gpu", "gpu").name]


def test_unwritable_cache_costs_only_the_cache(fakes, fake_measure, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    calib = calibrate("gpu")
    assert calib.sgemm_gflops == 500.0
    assert any("could not write calibration cache" in r.message for r in caplog.records)


def test_uncalibrated_devices_get_nominal_figures(fakes):
    fig = device_figures("gpu")
    assert fig.source == "nominal" and fig.sgemm_gflops == cal.NOMINAL["gpu"][0]
    assert device_figures("cuda", calibrate=True).source == "nominal"  # unavailable: never measured
    assert load_calibration("tpu") is None  # no plugin serves it


def test_fusion_comes_from_advisory_capabilities(helpers):
    register_backends(helpers.FakePlugin(helpers.RefBackend("fuser", "gpu", caps=frozenset({"fused_elementwise"})),
                                         helpers.RefBackend("plain", "rocm")))
    assert device_figures("gpu").fuses_elementwise
    assert not device_figures("rocm").fuses_elementwise


class PartialCalibrator:
    """A plugin measuring only what the hook specification asks: the seed's three figures."""

    def __init__(self, **extra):
        self.extra = extra

    @hookimpl
    def rlx_calibrate(self, backend, device):
        if backend != "fake-gpu":
            return None
        return {"sgemm_gflops": 900.0, "memory_bw_gbps": 90.0, "roundtrip_overhead_ns": 20_000.0, **self.extra}


def test_what_a_plugins_hook_leaves_out_is_measured_generically(fakes):
    register_backends(PartialCalibrator())
    calib = calibrate("gpu")
    assert (calib.sgemm_gflops, calib.memory_bw_gbps, calib.roundtrip_overhead_ns) == (900.0, 90.0, 20_000.0)
    assert calib.dispatch_overhead_ns > 0 and calib.vector_gflops > 0
    assert "add" in calib.kind_dispatch_ns and "add" in calib.kind_ns_per_element


def test_a_plugins_optional_figures_are_kept(fakes):
    register_backends(PartialCalibrator(dispatch_overhead_ns=15_000.0, vector_gflops=77.0, transfer_bw_gbps=25.0))
    calib = calibrate("gpu")
    assert (calib.dispatch_overhead_ns, calib.vector_gflops, calib.transfer_bw_gbps) == (15_000.0, 77.0, 25.0)
    assert "add" in calib.kind_dispatch_ns


class BadCalibrator:
    @hookimpl
    def rlx_calibrate(self, backend, device):
        return {"sgemm_gflops": -1.0} if backend == "fake-gpu" else None


def test_hook_returning_bad_figures_is_a_plugin_error(fakes):
    register_backends(BadCalibrator())
    with pytest.raises(PluginError, match=r"calibration of backend 'fake-gpu'.*returned bad figures"):
        calibrate("gpu")


def test_generic_measurement_through_any_backend(fakes):
    figures = measure_backend(fakes.gpu, budget_s=0.3)
    for name in SEED_FIELDS + ("dispatch_overhead_ns", "vector_gflops"):
        assert figures[name] > 0, name
    assert figures["transfer_bw_gbps"] is None
    table = figures["kind_ns_per_element"]
    assert all(len(v) == 2 and min(v) > 0 for v in table.values())


def test_progress_is_reported(fakes):
    seen = []
    with cal.progress_reporter(lambda fraction, message: seen.append((fraction, message))):
        measure_backend(fakes.gpu, budget_s=0.1)
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert "memory bandwidth" in [m for _, m in seen]

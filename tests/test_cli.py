"""The rlx command: devices, calibrate, bench (demo is tested with the core)."""
import json

import pytest

from rlx_core import Graph, Shape
from rlx_core.cli import main
from rlx_core.runtime.registry import install_hint, registry, reset_registry
from rlx_core.select import DevicePolicy, device_report
from rlx_core.select.calibration import clear_memo


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for suffix in ("DEVICES", "DENY_DEVICES", "PREFER_DEVICES", "DEVICE", "DEVICE_CHAIN", "BENCHMARK_PICK"):
        monkeypatch.delenv(f"RLX_{suffix}", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RLX_PLUGINS", "cpu")  # whatever else is installed here
    reset_registry()
    clear_memo()
    yield
    reset_registry()
    clear_memo()


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_table(capsys):
    """With RLX_PLUGINS=cpu only cpu has a row; every other device is named on the line that
    says why: 'not loaded' when a plugin installed here serves it, else 'not installed'
    (which line a device lands on depends on the plugins installed in this environment)."""
    code, out, _ = run(capsys, "devices")
    assert code == 0
    assert "plugins:" in out and "rlx-cpu" in out and "policy: allow=all pick=cost_model" in out
    assert "\ncpu " in out
    named = {}
    for line in out.splitlines():
        if line.startswith(("not loaded (", "not installed (")):
            why, _, labels = line.partition("): ")
            named.update((label, why.split(" (")[0]) for label in labels.split(", "))
    known = {r.label for r in device_report(None, DevicePolicy.from_env(), probe="cheap")}
    assert set(named) == known - {"cpu"}
    for label, why in named.items():
        assert why == ("not loaded" if registry().unloaded_plugin_for(label) else "not installed"), label


def test_devices_with_a_graph_shows_estimate_and_pick(capsys):
    code, out, _ = run(capsys, "devices", "--graph", "chain:1000:4", "--all")
    assert code == 0
    cpu_row = next(line for line in out.splitlines() if line.startswith("cpu "))
    assert " yes " in cpu_row and " us" in cpu_row and " * " in cpu_row and "nominal" in cpu_row
    assert "estimates for cpu use nominal figures" in out and "rlx calibrate" in out
    assert "tpu: no installed plugin serves it" in out and f"fix: {install_hint('tpu')}" in out
    assert f"fix: {install_hint('rocm')}" in out


def test_devices_names_the_variable_to_change(capsys, monkeypatch):
    monkeypatch.setenv("RLX_DENY_DEVICES", "cpu")
    code, out, _ = run(capsys, "devices")
    assert code == 0
    assert "cpu: denied by DevicePolicy" in out and "fix: remove 'cpu' from RLX_DENY_DEVICES" in out


def test_devices_json(capsys):
    code, out, _ = run(capsys, "devices", "--json", "--graph", "chain:256:2")
    data = json.loads(out)
    assert code == 0 and "cpu" in data["manifest"]["devices"]
    cpu = next(r for r in data["report"] if r["device"] == "cpu")
    assert cpu["recommended"] and cpu["supports_graph"] and cpu["estimate_ns"] > 0


def test_bad_environment_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "cpu,quantum")
    code, _, err = run(capsys, "devices")
    assert code == 2 and "RLX_DEVICES='cpu,quantum': unknown device 'quantum'" in err


def test_calibrate_measures_then_reads_the_cache(capsys, tmp_path):
    code, out, err = run(capsys, "calibrate")
    assert code == 0
    assert "sgemm GFLOP/s" in out and "measured" in out and str(tmp_path / "cache" / "rlx") in out
    assert "100%" in err and "measured in" in err  # the progress bar, on stderr
    code, out, _ = run(capsys, "calibrate", "cpu", "--json")
    data = json.loads(out)
    assert code == 0 and data[0]["backend"] == "cpu" and data[0]["sgemm_gflops"] > 0


def test_calibrate_unknown_device(capsys):
    code, _, err = run(capsys, "calibrate", "warp")
    assert code == 2 and "unknown device 'warp'" in err


def test_calibrate_unavailable_device_fails_cleanly(capsys):
    code, _, err = run(capsys, "calibrate", "cuda")
    assert code == 1 and "failed: DeviceUnavailableError" in err


def test_bench_builtin_workload(capsys):
    code, out, _ = run(capsys, "bench", "--graph", "chain:4096:4", "--runs", "3")
    assert code == 0 and "graph 'chain-4096x4'" in out and "fastest" in out
    code, out, _ = run(capsys, "bench", "--graph", "residual:8:64", "--runs", "2", "--json")
    data = json.loads(out)
    assert data[0]["device"] == "cpu" and data[0]["median_ns"] > 0 and data[0]["estimate_ns"] > 0


def test_bench_graph_file_and_plot(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    g = Graph("from-file")
    x, w = g.input("x", Shape((16,), "f32")), g.param("w", Shape((16,), "f32"))
    g.set_outputs([g.exp(x) * w])
    path = tmp_path / "g.json"
    path.write_text(g.to_json())
    png = tmp_path / "bench.png"
    code, out, _ = run(capsys, "bench", "--graph", str(path), "--runs", "2", "--plot", str(png))
    assert code == 0 and "from-file" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_usage_errors(capsys):
    assert run(capsys, "bench", "--graph", "nope:1")[0] == 2
    assert run(capsys, "bench", "--graph", "chain:x")[0] == 2
    assert run(capsys, "bench", "--runs", "0")[0] == 2
    code, out, _ = run(capsys, "bench", "--list")
    assert code == 0 and "chain:N:LEN" in out

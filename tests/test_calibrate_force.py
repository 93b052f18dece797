"""``rlx calibrate --force`` measures every figure again, including those a plugin keeps in
a cache of its own (rlx-wgpu's ``wgpu-calib-*.json`` used to survive it), and the command
says which figures were measured and which were read from a cache. Real calibrations of
the gpu device (lavapipe here)."""
import importlib.util
import json

import pytest

from rlx_core.cli import main
from rlx_core.runtime import registry
from rlx_core.runtime.registry import reset_registry
from rlx_core.select.calibration import calibration_path, clear_memo


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    reset_registry()
    clear_memo()
    if importlib.util.find_spec("rlx_wgpu") is None or not registry().is_available("gpu"):
        pytest.skip("no wgpu adapter here")
    yield tmp_path / "rlx"
    reset_registry()
    clear_memo()


def _calibrate(capsys, *flags) -> tuple[str, dict]:
    assert main(["calibrate", "gpu", *flags]) == 0
    text = capsys.readouterr().out
    assert main(["calibrate", "gpu", "--json"]) == 0  # (now cached: the same figures)
    return text, json.loads(capsys.readouterr().out)[0]


def test_force_measures_the_plugins_own_cache_again(gpu, capsys):
    text, first = _calibrate(capsys)
    assert "measured: " in text and "read from" not in text, text
    core_files = [calibration_path(registry().entry("gpu").name, "gpu")]
    plugin_files = [p for p in gpu.glob("wgpu-calib-*.json") if p not in core_files]
    assert len(plugin_files) == 1 and core_files[0].exists(), list(gpu.iterdir())
    tuned = plugin_files[0].stat().st_mtime_ns

    text, _ = _calibrate(capsys)  # rlx's own cache answers
    assert "every figure read from this file" in text, text

    for path in core_files:  # rlx's cache gone, the plugin's left: its figures are read, not measured
        path.unlink()
    clear_memo()
    text, again = _calibrate(capsys)
    assert f"read from {plugin_files[0]}: " in text and "sgemm_gflops" in text, text
    assert again["sources"]["sgemm_gflops"] == f"read from {plugin_files[0]}"
    assert again["sgemm_gflops"] == first["sgemm_gflops"]
    assert plugin_files[0].stat().st_mtime_ns == tuned

    text, forced = _calibrate(capsys, "--force")
    assert "read from" not in text, text
    assert set(forced["sources"].values()) == {"measured"}, forced["sources"]
    assert plugin_files[0].stat().st_mtime_ns != tuned  # the plugin measured and wrote its cache again

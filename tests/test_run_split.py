"""benchmarks/run_split.py: a full run against the device's work alone, per backend it knows."""
import json
from pathlib import Path

import pytest

from rlx_core.testing.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "run_split.py"


@pytest.mark.parametrize("any_device", ["tpu", "gpu"], indirect=True)
def test_split_is_reported(any_device, tmp_path):
    device = any_device
    bench = load_script(SCRIPT)
    out = tmp_path / "split.json"
    code = bench.main(["--devices", device, "--rounds", "3", "--seq", "8", "--d-model", "32", "--output", str(out)])
    result = json.loads(out.read_text())
    assert code == 0, result["skipped"]
    (row,) = result["results"]
    assert {"run", "device"} <= set(row["median_ms"]) and row["split"] > 0
    assert "| run / device |" in out.with_suffix(".md").read_text()


def test_backends_without_a_device_only_path_are_skipped_by_name(tmp_path):
    bench = load_script(SCRIPT)
    out = tmp_path / "split.json"
    assert bench.main(["--devices", "cpu", "--rounds", "1", "--seq", "8", "--d-model", "32",
                       "--output", str(out)]) == 1
    assert "no device-only measurement for backend 'cpu'" in json.loads(out.read_text())["skipped"]["cpu"]

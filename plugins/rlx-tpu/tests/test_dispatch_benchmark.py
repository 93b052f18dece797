"""benchmarks/tpu_dispatch.py: rlx-tpu's calls, its XLA program called directly and
jax.jit, on one workload, with the differences the report gives."""
import json
from pathlib import Path

from rlx_core.testing.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "tpu_dispatch.py"


def test_dispatch_benchmark_reports_every_contender(tmp_path):
    bench = load_script(SCRIPT)
    out = tmp_path / "dispatch.json"
    assert bench.main(["--workloads", "add", "--rounds", "2", "--calls", "2", "--output", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert set(row["us_per_call"]) == set(bench.CONTENDERS)
    assert set(row["differences_us"]) == {f"{a} - {b}" for a, b in bench.PAIRS}
    assert "rlx_numpy - xla_numpy" in out.with_suffix(".md").read_text()

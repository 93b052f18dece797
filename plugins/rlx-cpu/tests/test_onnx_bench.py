"""benchmarks/onnx_cpu_bench.py: its models import and run on rlx-cpu and onnxruntime
alike, and a short run yields the table (no timing is checked)."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import onnx_cpu_bench as bench  # noqa: E402


def test_a_short_run_checks_outputs_and_renders_the_table(tmp_path):
    models = bench.export_models(["gru", "ifloop"], tmp_path)
    latency = bench.measure_latency(models, rounds=2)
    assert set(latency) == {"gru", "ifloop"}
    for r in latency.values():
        assert r["ratio"] > 0 and r["alloc_bytes"] < bench.ALLOC_TARGET_BYTES
    text = bench.render({"latency": latency, "machine": bench.machine(), "load_average_before": None}, False)
    assert bench.LABELS["ifloop"] in text and "alloc B/run" in text


def test_the_compile_worker_reports_its_phases(tmp_path):
    models = bench.export_models(["ifloop"], tmp_path)
    result = bench.compile_worker(str(models["ifloop"][0]))
    assert set(result) == {"compile_ms", "import_ms", "start_ms"} and result["compile_ms"] > 0

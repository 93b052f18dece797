"""The node-test report writer (benchmarks/onnx_node_tests.py) and the README summary it
maintains."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def writer():
    spec = importlib.util.spec_from_file_location("onnx_node_tests_writer", ROOT / "benchmarks" / "onnx_node_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_writer_produces_json_and_markdown(writer, tmp_path):
    assert writer.main(["--device", "cpu", "--pattern", "^test_(relu|abs|nonzero_example)$", "--out",
                        str(tmp_path)]) == 0
    report = json.loads((tmp_path / "onnx.json").read_text())
    assert report["runners"] == ["rlx-cpu", "onnxruntime"]
    rows = {r["name"]: r for r in report["cases"]}
    assert set(rows) == {"test_relu", "test_abs", "test_nonzero_example"}
    assert rows["test_relu"]["rlx-cpu"]["status"] == "pass" and rows["test_relu"]["covered"]
    assert rows["test_nonzero_example"]["rlx-cpu"]["status"] == "unsupported"
    assert not rows["test_nonzero_example"]["covered"]
    assert report["summary"]["covered"]["cases"] == 2
    markdown = (tmp_path / "onnx.md").read_text()
    assert "| covered by the RLX importer | 2 | 2 (100.0%) | 2 (100.0%) |" in markdown
    assert "| NonZero | 1 | 0 | 0 / 0 / 1 / 0 | 1 |" in markdown


def test_readme_shows_the_committed_summary(writer):
    committed = writer.summary_section((ROOT / "benchmarks" / "results" / "onnx.md").read_text())
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- results:onnx -->\n", 1)[1].split("<!-- /results:onnx -->", 1)[0]
    assert block == committed

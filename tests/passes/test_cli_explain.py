"""``rlx run --explain`` prints what each graph pass changed, naming the ONNX nodes."""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_core.cli import main  # noqa: E402


@pytest.fixture
def gelu_model(tmp_path):
    """x @ w, then GELU written out as ONNX nodes (Div, Erf, Add, Mul, Mul) on Constant
    nodes, as torch exports it (float initializers would be params, set after compiling)."""
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    consts = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.float32)))
              for n, v in (("sqrt2", math.sqrt(2)), ("one", 1.0), ("half", 0.5))]
    nodes = consts + [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Div", ["h", "sqrt2"], ["d"], name="gelu_div"),
             helper.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="gelu_add"),
             helper.make_node("Mul", ["h", "a"], ["m"], name="gelu_mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="gelu_half")]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              initializer=[numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model)
    path = tmp_path / "gelu.onnx"
    onnx.save_model(model, str(path))
    return path


def test_run_explain(gelu_model, capsys, monkeypatch):
    monkeypatch.delenv("RLX_PASSES", raising=False)
    assert main(["run", str(gelu_model), "--device", "cpu", "--explain", "--check", "--repeat", "1"]) == 0
    text = capsys.readouterr().out
    assert "fuse_gelu" in text and "gelu <- " in text and "ONNX node 'gelu_half' (Mul, opset 17)" in text
    assert "check passed" in text


def test_run_explain_with_passes_off(gelu_model, capsys, monkeypatch):
    monkeypatch.setenv("RLX_PASSES", "none")
    assert main(["run", str(gelu_model), "--device", "cpu", "--explain", "--check", "--repeat", "1"]) == 0
    text = capsys.readouterr().out
    assert "graph passes off" in text and "fuse_gelu" not in text and "check passed" in text

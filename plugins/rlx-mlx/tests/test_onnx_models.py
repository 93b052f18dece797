"""Torch-exported ONNX models (two MLPs, a CNN, an encoder layer, a GPT-2 block: the
exports of ``benchmarks/pick_accuracy.py``) imported and run on mlx, against onnxruntime
(f32, within 1e-4). Skips where torch, onnx or onnxruntime are not installed."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from rlx_core import Session

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "pick_accuracy.py"
for module in ("torch", "onnx", "onnxruntime"):
    pytest.importorskip(module)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    if not SCRIPT.exists():
        pytest.skip(f"{SCRIPT} is not in this checkout")
    spec = importlib.util.spec_from_file_location("pick_accuracy", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    folder = tmp_path_factory.mktemp("onnx_models")
    return bench, dict(bench.export_onnx_models(bench.ONNX_MODELS, folder))


@pytest.mark.parametrize("name", ["onnx-mlp-8x64-256-10", "onnx-mlp-64x784-512-512-10", "onnx-cnn-1x3x64x64",
                                  "onnx-encoder-1x64x128", "onnx-gpt2-1x32x64"])
def test_exported_model_matches_onnxruntime(exported, name):
    import onnxruntime
    bench, paths = exported
    graph, inputs, params = bench.load_case(paths[name])
    compiled = Session("mlx").compile(graph)
    compiled.set_params(params)
    got = compiled.run(inputs)
    session = onnxruntime.InferenceSession(str(paths[name]), providers=["CPUExecutionProvider"])
    want = session.run(None, inputs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        err = float(np.max(np.abs(np.asarray(g, np.float64) - w)))
        assert err <= 1e-4 * max(1.0, float(np.max(np.abs(w)))), f"{name}: max abs error {err:.3g}"

"""Torch-exported ONNX models on ``gpu`` (lavapipe in CI), against the reference
interpreter: the frontend tests' models (tests/frontends/test_onnx_models.py: MLP, CNN,
UNet, transformer encoder layer, GPT-2 block, LSTM + GRU), an embedding lookup with an
``Equal`` padding mask, and a scripted model whose loops export as ONNX ``Loop`` (a counted
one and one that stops on its condition). Their ids, masks, counts and loop counters are
i64, which rlx-wgpu computes exactly by emulation."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("wgpu")

from rlx_core import Session, evaluate  # noqa: E402
from rlx_core.frontends.onnx import load_onnx  # noqa: E402
from rlx_core.testing.compare import assert_close  # noqa: E402
from rlx_core.testing.external import gpt2_block  # noqa: E402
from rlx_core.testing.scripts import load_script  # noqa: E402

FRONTEND_MODELS = Path(__file__).resolve().parents[3] / "tests" / "frontends" / "test_onnx_models.py"


class Tokens(torch.nn.Module):
    """Embedding lookup of i64 ids, a padding mask from ``Equal``, a masked mean."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16, padding_idx=0)
        self.proj = torch.nn.Linear(16, 8)

    def forward(self, ids):
        mask = ids.eq(0)
        h = self.emb(ids).masked_fill(mask.unsqueeze(-1), 0.0)
        return self.proj(h).sum(1) / (~mask).sum(1, keepdim=True)


class Looped(torch.nn.Module):
    """Scripted: a counted loop using its i64 counter, then one that runs until a condition."""

    def forward(self, x):
        for i in range(4):
            x = x * 0.5 + i
        while bool(x.sum() < 100.0):
            x = x * 2.0 + 1.0
        return x


def _model(frontend, name: str):
    """``(module, example inputs, export keyword arguments)`` of model ``name``."""
    seeded, nn = frontend._seeded, torch.nn
    ids = torch.tensor([[3, 7, 0, 0, 12, 49, 1], [0, 5, 5, 9, 2, 0, 0]])
    builders = {
        "mlp": lambda: (nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4),
                                      nn.LogSoftmax(-1)), (seeded(5, 16),), {}),
        "cnn": lambda: (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
                        (seeded(2, 3, 16, 16),), {}),
        "unet": lambda: (frontend.TinyUNet(), (seeded(2, 3, 16, 16),), {"do_constant_folding": False}),
        "encoder": lambda: (frontend.EncoderLayer(), (seeded(2, 8, 32),), {}),
        "gpt2": lambda: (gpt2_block(), (seeded(2, 8, 32),), {}),
        "rnn": lambda: (frontend.Recurrent(), (seeded(3, 7, 8),), {}),
        "embedding_equal_mask": lambda: (Tokens(), (ids,), {}),
        "loop": lambda: (torch.jit.script(Looped()), (seeded(2, 3),), {}),
    }
    return builders[name]()


@pytest.fixture(scope="module")
def frontend():
    return load_script(FRONTEND_MODELS, skip_missing=True)


@pytest.mark.parametrize("name", ["mlp", "cnn", "unet", "encoder", "gpt2", "rnn", "embedding_equal_mask", "loop"])
def test_exported_model_runs_on_gpu(frontend, name):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's deprecation
        module, args, kwargs = _model(frontend, name)
    model, feeds = frontend.export(module, *args, **kwargs)
    imported = load_onnx(model)
    feeds = {n: feeds[n] for n in imported.input_names}
    if name in ("embedding_equal_mask", "loop"):  # the models this test is about compute on i64
        assert any(n.outputs[0].dtype.value == "i64" and n.kind not in ("input", "constant")
                   for n in _all_nodes(imported.graph))
    want = evaluate(imported.graph, feeds, imported.params)
    compiled = Session("gpu").compile(imported.graph)
    compiled.set_params(imported.params)
    got = compiled.run(feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(np.asarray(g), w, imported.graph.output_shapes[i].dtype, what=f"{name} output {i}")


def _all_nodes(graph):
    """The nodes of ``graph`` and of every control-flow body in it."""
    for node in graph.nodes:
        yield node
        for value in node.attrs.values():
            if hasattr(value, "nodes") and hasattr(value, "outputs"):
                yield from _all_nodes(value)

"""Torch-exported ONNX models through the passes: after them the graph holds the fused
ops (attention, gelu, layer_norm, rms_norm; no BatchNorm chain), and rlx-cpu's outputs
equal onnxruntime's within the per-dtype tolerance, params or constants alike."""
from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from rlx_core import Session  # noqa: E402
from rlx_core.frontends.onnx import load_onnx  # noqa: E402
from rlx_core.passes.pipeline import optimize  # noqa: E402
from rlx_core.testing.compare import assert_close  # noqa: E402
from rlx_core.testing.external import gpt2_block  # noqa: E402


def export(module, x, opset=17, **kwargs):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
        torch.onnx.export(module.eval(), (x,), buf, dynamo=False, opset_version=opset, input_names=["x"], **kwargs)
    return onnx.load_from_string(buf.getvalue())


def _seeded(*dims):
    return torch.from_numpy(np.random.default_rng(sum(dims)).standard_normal(dims).astype(np.float32))


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x, src_mask=None, is_causal=False)


class RMSNorm(torch.nn.Module):
    def __init__(self, d=32, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        gen = torch.Generator().manual_seed(0)
        for m in self.body:
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics that are not the identity
                m.running_mean.normal_(generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
                m.weight.data.normal_(generator=gen)
                m.bias.data.normal_(generator=gen)

    def forward(self, x):
        return self.body(x)


def _mlp_gelu():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


# name -> (module factory, input dims, export kwargs, kinds wanted after the passes, kinds gone)
MODELS = {
    "encoder_layer": (Encoder, (2, 5, 32), {}, {"attention", "layer_norm"}, {"softmax"}),
    "encoder_layer_opset14": (Encoder, (2, 5, 32), {"opset": 14}, {"attention", "layer_norm"},
                              {"softmax", "reduce_mean", "sqrt"}),
    "gpt2_block": (gpt2_block, (2, 7, 32), {}, {"attention", "layer_norm", "gelu_tanh"},
                   {"softmax", "where", "tanh"}),
    "gpt2_block_opset14": (gpt2_block, (2, 7, 32), {"opset": 14}, {"attention", "layer_norm", "gelu_tanh"},
                           {"softmax", "where", "tanh", "reduce_mean"}),
    "mlp_gelu": (_mlp_gelu, (4, 16), {}, {"gelu"}, {"erf"}),
    "rms_norm": (RMSNorm, (2, 5, 32), {}, {"rms_norm"}, {"reduce_mean", "sqrt", "rsqrt"}),
    "cnn_batchnorm": (ConvBN, (2, 3, 8, 8), {"do_constant_folding": False}, {"conv"}, {"sub", "div", "sqrt"}),
}


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request):
    factory, dims, kwargs, want, gone = MODELS[request.param]
    x = _seeded(*dims)
    model = export(factory(), x, **kwargs)
    feeds = {"x": x.numpy()}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return request.param, model, feeds, expected, want, gone


@pytest.mark.parametrize("initializers", ["params", "constants"])
def test_exported_model_gets_fused_ops_and_matches_onnxruntime(exported, initializers):
    name, model, feeds, expected, want, gone = exported
    imported = load_onnx(model, initializers=initializers)
    optimized, report = optimize(imported.graph)
    kinds = {n.kind for n in optimized.nodes}
    if name == "cnn_batchnorm" and initializers == "params":
        want, gone = set(), set()  # params are set after compiling: their BatchNorm chains stay
    assert want <= kinds, report.text()
    assert not gone & kinds, report.text()
    compiled = Session("cpu").compile(imported.graph)
    compiled.set_params(imported.params)
    got = compiled.run(feeds)
    for g, e in zip(got, expected):
        assert_close(g, e, "f32", what=f"{name} ({initializers})")
    assert compiled.explain() == report.text()


def test_batch_norm_chain_gone_with_constants():
    model = export(ConvBN(), _seeded(1, 3, 8, 8), do_constant_folding=False)
    assert [n.op_type for n in model.graph.node].count("BatchNormalization") == 2
    optimized, _ = optimize(load_onnx(model, initializers="constants").graph)
    assert [n.kind for n in optimized.nodes if n.kind not in ("input", "constant")] == ["conv", "relu", "conv", "relu"]


def test_attention_scale_is_exact_for_gpt2():
    model = export(gpt2_block(), _seeded(1, 6, 32))
    optimized, _ = optimize(load_onnx(model).graph)
    node = next(n for n in optimized.nodes if n.kind == "attention")
    assert node.attrs["mask"] == "causal" and node.attrs["scale"] == pytest.approx(1 / math.sqrt(8), rel=1e-7)

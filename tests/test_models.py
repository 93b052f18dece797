"""The standard models compute what torch's modules compute with the same weights."""
import numpy as np
import pytest

from rlx_core import evaluate, models

torch = pytest.importorskip("torch")


def _tensor(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _linear(layer, params, name):
    layer.weight.copy_(_tensor(params[f"{name}.w"].T))
    layer.bias.copy_(_tensor(params[f"{name}.b"]))


def _run(graph, params, seed=0):
    inputs = models.example_inputs(graph, seed)
    return inputs, evaluate(graph, inputs, params)[0]


@torch.no_grad()
def test_transformer_block_is_torch_encoder_layer():
    g, p = models.transformer_block(batch=2, seq=10, d_model=32, heads=4, ffn=64)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, activation="gelu",
                                             batch_first=True, norm_first=False).eval()
    layer.self_attn.in_proj_weight.copy_(_tensor(p["attn.in.w"].T))
    layer.self_attn.in_proj_bias.copy_(_tensor(p["attn.in.b"]))
    _linear(layer.self_attn.out_proj, p, "attn.out")
    _linear(layer.linear1, p, "ffn.in")
    _linear(layer.linear2, p, "ffn.out")
    for ln in ("1", "2"):
        getattr(layer, f"norm{ln}").weight.copy_(_tensor(p[f"ln{ln}.gamma"]))
        getattr(layer, f"norm{ln}").bias.copy_(_tensor(p[f"ln{ln}.beta"]))
    inputs, got = _run(g, p)
    want = layer(_tensor(inputs["x"])).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_mlp_is_torch_sequential():
    g, p = models.mlp(batch=3, sizes=(20, 16, 8))
    net = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    _linear(net[0], p, "fc0")
    _linear(net[2], p, "fc1")
    inputs, got = _run(g, p)
    np.testing.assert_allclose(got, net(_tensor(inputs["x"])).numpy(), rtol=1e-5, atol=1e-6)


@torch.no_grad()
def test_small_cnn_is_torch_convnet():
    g, p = models.small_cnn(batch=2, size=16, widths=(4, 8, 6), classes=5)
    nn = torch.nn
    convs = [nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 8, 3, padding=1), nn.Conv2d(8, 6, 3, padding=1)]
    for i, conv in enumerate(convs):
        conv.weight.copy_(_tensor(p[f"conv{i}.w"]))
        conv.bias.copy_(_tensor(p[f"conv{i}.b"]))
    fc = nn.Linear(6, 5)
    _linear(fc, p, "fc")
    net = nn.Sequential(convs[0], nn.ReLU(), nn.MaxPool2d(2), convs[1], nn.ReLU(), nn.MaxPool2d(2),
                        convs[2], nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc)
    inputs, got = _run(g, p)
    np.testing.assert_allclose(got, net(_tensor(inputs["x"])).numpy(), rtol=1e-4, atol=1e-5)


def test_elementwise_chain_is_its_numpy_expression():
    g, _ = models.elementwise_chain(n=64, length=18)
    inputs, got = _run(g, {})
    x = inputs["x"].astype(np.float64)
    y = np.tanh(x * 1.5 + 0.25) - 0.5
    y = np.exp(2 / (1 + np.exp(-y)))
    y = np.log(np.sqrt(np.abs(-y)) + 1)
    y = np.maximum(np.tanh(np.maximum(y, 0) * 0.75), 0.1)
    y = y * 1.5 + 0.25  # ops 17 and 18 start the cycle again
    np.testing.assert_allclose(got, y, rtol=1e-5)
    assert len(g.nodes) == 1 + 18 + 9  # input, ops, one constant per scalar-binary op


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_models_are_deterministic_and_typed(name):
    g1, p1 = models.MODELS[name]()
    g2, p2 = models.MODELS[name]()
    assert g1.fingerprint() == g2.fingerprint()
    assert sorted(p1) == sorted(g1.param_names)
    for key, value in p1.items():
        np.testing.assert_array_equal(value, p2[key])
        assert value.dtype == np.float32 and value.shape == g1.node_of(key).shape.dims
    inputs = models.example_inputs(g1)
    assert sorted(inputs) == sorted(g1.input_names)


def test_f64_models():
    g, p = models.mlp(batch=2, sizes=(4, 3), dtype="f64")
    assert all(v.dtype == np.float64 for v in p.values())
    assert evaluate(g, models.example_inputs(g), p)[0].dtype == np.float64


def test_transformer_block_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="multiple of heads"):
        models.transformer_block(d_model=30, heads=4)

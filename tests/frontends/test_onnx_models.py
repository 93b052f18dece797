"""Real models, built here (no downloads): torch modules (MLP, CNN, UNet, transformer
encoder layer, GPT-2 block, LSTM + GRU) exported with torch.onnx.export, and models
written with onnx.helper, each imported, run on rlx-cpu and compared with onnxruntime
to 1e-4 (f32)."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402

from rlx_core.frontends.onnx import load_onnx  # noqa: E402
from rlx_core.testing.external import gpt2_block  # noqa: E402


def export(module, *args, opset=17, **kwargs):
    """``module`` (in eval mode) exported with the TorchScript exporter, as a ModelProto."""
    buf = io.BytesIO()
    names = [f"x{i}" for i in range(len(args))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
        torch.onnx.export(module.eval(), args, buf, dynamo=False, opset_version=opset, input_names=names,
                          **kwargs)
    return onnx.load_from_string(buf.getvalue()), {n: a.numpy() for n, a in zip(names, args)}


class EncoderLayer(torch.nn.Module):
    """torch's TransformerEncoderLayer (post-LN, ReLU), called with explicit masks: its
    defaults trip the TorchScript tracer in torch 2.13."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x, src_mask=None, is_causal=False)


class TinyUNet(torch.nn.Module):
    """Conv + BatchNorm + pooling down, transposed conv and nearest/bilinear upsampling up,
    a skip connection (Concat) and a sigmoid head."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                        torch.nn.LeakyReLU(0.1))
        self.pool = torch.nn.AvgPool2d(2)
        self.mid = torch.nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.up = torch.nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.bilinear = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.head = torch.nn.Conv2d(24, 1, 1)

    def forward(self, x):
        skip = self.down(x)
        mid = torch.relu(self.mid(self.pool(skip)))
        up = torch.cat([skip, self.up(mid), self.bilinear(mid)], dim=1)
        return torch.sigmoid(self.head(up))


class Recurrent(torch.nn.Module):
    """A two-layer bidirectional LSTM then a GRU over its outputs, batch first."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(24, 6, batch_first=True)

    def forward(self, x):
        y, _ = self.lstm(x)
        z, h = self.gru(y)
        return z + h.transpose(0, 1)


def _seeded(*dims):
    return torch.from_numpy(np.random.default_rng(sum(dims)).standard_normal(dims).astype(np.float32))


@pytest.mark.parametrize("opset", [14, 17])
@pytest.mark.parametrize("name", ["mlp", "cnn", "unet", "encoder", "gpt2", "rnn"])
def test_torch_models_match_onnxruntime(ox, name, opset):
    torch.manual_seed(0)
    builders = {
        "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                            torch.nn.GELU(), torch.nn.Linear(32, 4), torch.nn.LogSoftmax(-1)),
                        _seeded(5, 16)),
        "cnn": lambda: (torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                            torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2),
                                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                            torch.nn.Linear(16, 10)), _seeded(2, 3, 16, 16)),
        "unet": lambda: (TinyUNet(), _seeded(2, 3, 16, 16)),
        "encoder": lambda: (EncoderLayer(), _seeded(2, 8, 32)),
        "gpt2": lambda: (gpt2_block(), _seeded(2, 8, 32)),
        "rnn": lambda: (Recurrent(), _seeded(3, 7, 8)),
    }
    module, x = builders[name]()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    model, feeds = export(module, x, opset=opset, do_constant_folding=name != "unet")  # unet keeps BatchNormalization
    ox.assert_matches_onnxruntime(model, feeds)
    with torch.no_grad():
        np.testing.assert_allclose(ox.run_rlx(model, feeds)[0], module(x).numpy(), rtol=1e-4, atol=1e-4)


def test_exported_model_with_a_dynamic_batch_imports_at_a_given_shape(ox):
    module = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Tanh())
    model, _ = export(module, _seeded(2, 6), dynamic_axes={"x0": {0: "batch"}})
    x = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
    ox.assert_matches_onnxruntime(model, {"x0": x}, input_shapes={"x0": (7, 6)})


# --- models written with onnx.helper ------------------------------------------------------
F = TensorProto.FLOAT


def test_helper_model_with_initializers_as_params_or_constants(ox):
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    shape = np.array([0, -1], np.int64)  # Reshape: 0 copies the input's dim
    model = ox.make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
         helper.make_node("Reshape", ["hb", "shape"], ["y"])],
        [("x", F, [2, 5, 4])], [("y", F, [2, 15])],
        initializers=[onnx.numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (shape, "shape"))])
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    ox.assert_matches_onnxruntime(model, {"x": x})
    ox.assert_matches_onnxruntime(model, {"x": x}, initializers="constants")


def test_if_with_a_runtime_condition_reads_outer_values(ox):
    then = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [3])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [3])])
    model = ox.make_model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        [("x", F, [3]), ("w", F, [3])], [("y", F, [3])],
        initializers=[onnx.numpy_helper.from_array(np.array(0, np.float32), "zero")])
    w = np.array([2, 3, 4], np.float32)
    for x in (np.array([1, 2, 3], np.float32), np.array([-1, -2, 0.5], np.float32)):
        ox.assert_matches_onnxruntime(model, {"x": x, "w": w})


def test_loop_with_scan_outputs_and_a_known_trip_count(ox):
    """y_{i+1} = y_i * 0.5 + i for 4 iterations; every y_i is also a scan output."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["y_in", "half"], ["h"]),
         helper.make_node("Add", ["h", "fi"], ["y_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["y_out"], ["scan_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [2]), helper.make_tensor_value_info("scan_out", F, [2])])
    model = ox.make_model(
        [helper.make_node("Loop", ["trips", "", "y0"], ["y", "ys"], body=body)],
        [("y0", F, [2]), ("half", F, [])], [("y", F, [2]), ("ys", F, [4, 2])],
        initializers=[onnx.numpy_helper.from_array(np.array(4, np.int64), "trips")])
    assert "scan" in {n.kind for n in load_onnx(model).graph.nodes}
    ox.assert_matches_onnxruntime(model, {"y0": np.array([1, -2], np.float32), "half": np.array(0.5, np.float32)})


def test_loop_that_stops_on_its_condition_becomes_a_while(ox):
    """Double x until its sum exceeds the limit (at most 10 times)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x_out"]), helper.make_node("ReduceSum", ["x_out"], ["s"],
                                                                                  keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("x_out", F, [3])])
    model = ox.make_model(
        [helper.make_node("Loop", ["trips", "go", "x0"], ["x"], body=body)],
        [("x0", F, [3]), ("limit", F, []), ("go", TensorProto.BOOL, [])], [("x", F, [3])],
        initializers=[onnx.numpy_helper.from_array(np.array(10, np.int64), "trips")])
    for limit, go in ((100.0, True), (1e9, True), (100.0, False)):
        ox.assert_matches_onnxruntime(model, {"x0": np.array([1, 2, 0.5], np.float32), "limit": np.array(limit, np.float32),
                                           "go": np.array(go)})


def test_scan_with_axes_and_directions(ox):
    """A running sum over axis 1 of one input (reversed) and a per-step product output
    stacked along axis 1, on opset 16 Scan."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "a_t"], ["acc_out"]), helper.make_node("Mul", ["acc_out", "b_t"], ["y_t"])],
        "body",
        [helper.make_tensor_value_info("acc_in", F, [2]), helper.make_tensor_value_info("a_t", F, [2]),
         helper.make_tensor_value_info("b_t", F, [2])],
        [helper.make_tensor_value_info("acc_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])])
    model = ox.make_model(
        [helper.make_node("Scan", ["acc0", "a", "b"], ["acc", "ys"], body=body, num_scan_inputs=2,
                          scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1],
                          scan_output_directions=[1])],
        [("acc0", F, [2]), ("a", F, [2, 5]), ("b", F, [5, 2])], [("acc", F, [2]), ("ys", F, [2, 5])], opset=16)
    rng = np.random.default_rng(3)
    ox.assert_matches_onnxruntime(model, {"acc0": np.zeros(2, np.float32),
                                       "a": rng.standard_normal((2, 5)).astype(np.float32),
                                       "b": rng.standard_normal((5, 2)).astype(np.float32)})


@pytest.mark.parametrize("equation,dims", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]), ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 2)]), ("i,j->ij", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ijk,ikl,ilm->im", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ("iij->ji", [(3, 3, 2)]),
])
def test_einsum_patterns(ox, equation, dims):
    rng = np.random.default_rng(4)
    names = [f"x{i}" for i in range(len(dims))]
    out = np.einsum(equation, *(np.zeros(d) for d in dims))
    model = ox.make_model([helper.make_node("Einsum", names, ["y"], equation=equation)],
                       [(n, F, list(d)) for n, d in zip(names, dims)], [("y", F, list(out.shape))])
    ox.assert_matches_onnxruntime(model, {n: rng.standard_normal(d).astype(np.float32) for n, d in zip(names, dims)})


@pytest.mark.parametrize("op,attrs", [("RandomNormal", {"mean": 1.0, "scale": 2.0}),
                                      ("RandomUniform", {"low": -1.0, "high": 3.0})])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_random_ops_in_ort_mode_reproduce_onnxruntime(ox, op, attrs, dtype):
    model = ox.make_model([helper.make_node(op, [], ["y"], shape=[3, 50], seed=7.0, dtype=dtype, **attrs),
                        helper.make_node(f"{op}Like", ["x"], ["z"], seed=11.0, **attrs)],
                       [("x", dtype, [40])], [("y", dtype, [3, 50]), ("z", dtype, [40])])
    x = np.zeros(40, onnx.helper.tensor_dtype_to_np_dtype(dtype))
    expected = ox.run_onnxruntime(model, {"x": x})
    got = ox.run_rlx(model, {"x": x}, rng_mode="ort")
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("node,inits,out_dims", [
    (helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"]),
     {"starts": [3, -1], "ends": [0, -100], "axes": [2, 0], "steps": [-1, -2]}, [2, 4, 3]),
    (helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="reflect"),
     {"pads": [2, 0, 1, 1], "axes": [2, 1]}, [3, 5, 8]),
    (helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap"), {"pads": [0, 5, -1, 1, 2, 0]}, [4, 11, 4]),
    (helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[-1, 0]), {"shape": [2, 5]}, [5, 4, 2]),
])
def test_axes_lists_keep_their_order(ox, node, inits, out_dims):
    """Axis lists pair with other lists (starts, pads ...), so their order matters."""
    initializers = [onnx.numpy_helper.from_array(np.array(v, np.int64), k) for k, v in inits.items()]
    model = ox.make_model([node], [("x", F, [3, 4, 5])], [("y", F, out_dims)], initializers=initializers)
    ox.assert_matches_onnxruntime(model, {"x": np.arange(60, dtype=np.float32).reshape(3, 4, 5)})


def test_det_of_random_singular_and_permuted_matrices(ox):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((4, 5, 5)).astype(np.float32)
    a[1, 3] = a[1, 0] * 2  # singular
    a[2] = a[2][[4, 2, 0, 1, 3]]  # pivoting needed
    a[3, :, 0] = 0  # a zero first column
    model = ox.make_model([helper.make_node("Det", ["a"], ["d"])], [("a", F, [4, 5, 5])], [("d", F, [4])])
    ox.assert_matches_onnxruntime(model, {"a": a})
    np.testing.assert_allclose(ox.run_rlx(model, {"a": a})[0], np.linalg.det(a.astype(np.float64)), atol=1e-4,
                               rtol=1e-4)


def test_bernoulli_draws_with_the_given_probabilities(ox):
    p = np.repeat(np.array([0.0, 0.25, 0.9, 1.0], np.float32), 4000)
    model = ox.make_model([helper.make_node("Bernoulli", ["p"], ["y"], seed=3.0)], [("p", F, [16000])],
                          [("y", F, [16000])])
    y = ox.run_rlx(model, {"p": p}, rng_mode="ort")[0].reshape(4, 4000)
    assert set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.mean(axis=1), [0.0, 0.25, 0.9, 1.0], atol=0.03)

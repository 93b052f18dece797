"""What a deployment is built from, checked without a cluster: model import and batching
rules, request checks, packing and splitting batches, payload formats, replica resources
from the policy, errors crossing processes."""
import io
import json
import pickle

import numpy as np
import pytest

from rlx_core import Graph, Session, Shape
from rlx_core.errors import ArgumentTypeError, DeviceFallbackError, InputError, ParamError, RlxError
from rlx_core.select import DevicePolicy
from rlx_serve.app import replica_resources
from rlx_serve.errors import BadRequestError, RequestError, ServeConfigError, as_request_error
from rlx_serve.model import Batching, Signature, load_model
from rlx_serve.payload import JSON, NPY, NPZ, decode, encode
from rlx_serve.demo import mlp_graph, mlp_numpy
from rlx_serve.reply import Prediction


def dense_graph(rows=4, out_rows=None):
    g = Graph("dense")
    x = g.input("x", Shape((rows, 3), "f32"))
    w = g.param("w", Shape((3, 2), "f32"))
    y = x @ w
    g.set_outputs([y if out_rows is None else y[:out_rows]])
    return g


W = np.arange(6, dtype=np.float32).reshape(3, 2)


# --- model import and batching ------------------------------------------------------------------
def test_onnx_symbolic_batch_dim_turns_batching_on(mlp):
    path, _ = mlp
    spec = load_model(path)
    assert spec.batching == Batching(8, 0.005)
    assert spec.signature.to_dict() == {"inputs": [{"name": "x", "dims": [8, 16], "dtype": "f32"}],
                                        "outputs": [{"name": "y", "dims": [8, 4], "dtype": "f32"}], "batch": 8}
    assert load_model(path, batching=Batching(32, 0.001)).signature.batch == 32
    off = load_model(path, batching=False, input_shapes={"x": (2, 16)})
    assert off.batching is None and off.signature.inputs[0].dims == (2, 16)


def test_onnx_weights_replace_initializers(mlp, tmp_path):
    path, weights = mlp
    np.savez(tmp_path / "w.npz", w2=weights["w2"] * 2)
    spec = load_model(path, weights=tmp_path / "w.npz")
    np.testing.assert_array_equal(spec.params["w2"], weights["w2"] * 2)
    np.testing.assert_array_equal(spec.params["w1"], weights["w1"])


def test_graph_batches_only_when_asked():
    assert load_model(dense_graph(), weights={"w": W}).batching is None
    spec = load_model(dense_graph(), weights={"w": W}, batching=True)
    assert spec.batching == Batching(4, 0.005) and spec.signature.batch == 4
    with pytest.raises(ServeConfigError, match="leading dim\\); Batching.max_batch_size=8 cannot differ"):
        load_model(dense_graph(), weights={"w": W}, batching=Batching(8))
    with pytest.raises(ServeConfigError, match=r"every input and output needs leading dim 4; not so: output"):
        load_model(dense_graph(out_rows=2), weights={"w": W}, batching=True)


def test_bad_sources_settings_and_weights(tmp_path):
    with pytest.raises(ServeConfigError, match="expected an .onnx model or a graph .json file"):
        load_model(tmp_path / "model.pt")
    with pytest.raises(ArgumentTypeError, match="serves a Graph or the path"):
        load_model(42)
    with pytest.raises(ServeConfigError, match="input_shapes applies to ONNX models only"):
        load_model(dense_graph(), weights={"w": W}, input_shapes={"x": (1, 3)})
    with pytest.raises(ParamError, match=r"no weights given for params \['w'\]"):
        load_model(dense_graph())
    with pytest.raises(ParamError, match=r"has no params \['v'\]; its params: \['w'\]"):
        load_model(dense_graph(), weights={"w": W, "v": W})
    with pytest.raises(ParamError, match=r"expected dims \[3, 2\], got \[2, 3\]"):
        load_model(dense_graph(), weights={"w": W.T})
    with pytest.raises(ServeConfigError, match="max_batch_size must be an integer >= 1"):
        Batching(0)
    with pytest.raises(ServeConfigError, match="wait_timeout_s must be seconds"):
        Batching(4, -1)
    path = tmp_path / "g.json"
    path.write_text(dense_graph().to_json())
    assert load_model(path, weights={"w": W}).name == "dense"


# --- request checks ----------------------------------------------------------------------------
def test_check_rejects_what_the_graph_cannot_take():
    batched = Signature.of(dense_graph(), batch=4)
    exact = Signature.of(dense_graph())
    for sig, inputs, message in [
        (batched, {"x": np.ones((2, 3), np.float32), "z": 1}, r"expected \['x'\], got \['x', 'z'\]; unknown: \['z'\]"),
        (batched, {}, r"missing: \['x'\]"),
        (batched, [1, 2], "inputs must map input names to arrays, got list"),
        (batched, {"x": np.ones((5, 3), np.float32)}, r"expected dims \[r, 3\] with 1 <= r <= 4 rows, got \[5, 3\]"),
        (batched, {"x": np.ones((0, 3), np.float32)}, r"with 1 <= r <= 4 rows, got \[0, 3\]"),
        (batched, {"x": np.ones((2, 2), np.float32)}, r"expected dims \[r, 3\]"),
        (batched, {"x": np.ones((2, 3))}, "expected dtype f32, got f64"),
        (batched, {"x": [["a", "b", "c"]]}, "cannot read list as f32 rows"),
        (exact, {"x": np.ones((2, 3), np.float32)}, r"expected dims \[4, 3\], got \[2, 3\]"),
    ]:
        with pytest.raises(BadRequestError, match=message) as info:
            sig.check(inputs)
        assert isinstance(info.value, InputError) and info.value.status == 400
    got = batched.check({"x": [[1, 2, 3]]})  # JSON lists take the declared dtype
    assert got["x"].dtype == np.float32 and got["x"].shape == (1, 3)
    assert exact.check({"x": np.arange(12, dtype=np.float32)})["x"].shape == (4, 3)  # a flat buffer, as in run()


def test_pack_and_split_give_each_request_its_rows():
    sig = Signature.of(dense_graph(), batch=4)
    compiled = Session("cpu").compile(dense_graph())
    compiled.set_param("w", W)
    rng = np.random.default_rng(0)
    requests = [sig.check({"x": rng.standard_normal((r, 3)).astype(np.float32)}) for r in (3, 1, 2, 4, 1)]
    runs = sig.pack(requests)
    assert [(run.members, run.rows) for run in runs] == [((0, 1), (3, 1)), ((2,), (2,)), ((3,), (4,)), ((4,), (1,))]
    assert all(run.feeds["x"].shape == (4, 3) for run in runs)
    np.testing.assert_array_equal(runs[1].feeds["x"][2:], 0)  # padding
    answers = {}
    for run in runs:
        out = compiled.run(run.feeds).as_dict()
        for i, part in zip(run.members, sig.split(out, run.rows)):
            answers[i] = part["output0"]
    for i, feeds in enumerate(requests):
        np.testing.assert_allclose(answers[i], feeds["x"] @ W, rtol=1e-6)


# --- payloads ----------------------------------------------------------------------------------
def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def test_payload_formats_round_trip():
    sig = Signature.of(dense_graph(), batch=4)
    x = np.ones((2, 3), np.float32)
    assert decode("application/json; charset=utf-8", json.dumps({"inputs": {"x": x.tolist()}}).encode(), sig) \
        == (JSON, {"x": x.tolist()})
    fmt, inputs = decode(NPZ, _npz(x=x), sig)
    assert fmt == NPZ and np.array_equal(inputs["x"], x)
    fmt, inputs = decode(NPY, _npy(x), sig)
    assert fmt == NPY and np.array_equal(inputs["x"], x)
    reply = Prediction({"y": np.full((2, 2), 0.5, np.float32)}, "cpu", "r1", 7, (("vulkan", "RuntimeError: lost"),), 1)
    body, media, headers = encode(reply, JSON)
    assert media == JSON and json.loads(body) == {"outputs": {"y": [[0.5, 0.5], [0.5, 0.5]]}, "device": "cpu",
                                                  "replica": "r1", "pid": 7, "retries": 1,
                                                  "fallback": [["vulkan", "RuntimeError: lost"]]}
    body, media, headers = encode(reply, NPY)
    assert media == NPY and np.array_equal(np.load(io.BytesIO(body)), reply.outputs["y"])
    assert headers["x-rlx-device"] == "cpu" and json.loads(headers["x-rlx-fallback"]) == [["vulkan",
                                                                                          "RuntimeError: lost"]]
    body, media, _ = encode(reply, NPZ)
    assert media == NPZ and np.array_equal(np.load(io.BytesIO(body))["y"], reply.outputs["y"])


def test_bad_payloads_are_4xx():
    sig = Signature.of(dense_graph(), batch=4)
    for media, body, status, message in [
        (JSON, b"{not json", 400, "the body is not JSON"),
        (JSON, b'{"x": [1]}', 400, r'a JSON request is \{"inputs"'),
        (NPZ, b"garbage", 400, "not a numpy npz file"),
        (NPY, _npz(x=np.ones(3)), 400, "holds an archive; send it as application/x-npz"),
        (NPZ, _npy(np.ones(3)), 400, "holds a single array"),
        (NPY, _npy(np.array([{"a": 1}], dtype=object)), 400, "not a numpy npy file"),  # never unpickled
        ("text/csv", b"1,2,3", 415, "unsupported Content-Type 'text/csv'"),
    ]:
        with pytest.raises(BadRequestError, match=message) as info:
            decode(media, body, sig)
        assert info.value.status == status
    complex_reply = Prediction({"z": np.ones(2, np.complex64)}, "cpu", "r", 1)
    with pytest.raises(BadRequestError, match="complex .* JSON cannot carry: send application/x-npz") as info:
        encode(complex_reply, JSON)
    assert info.value.status == 406


# --- resources, errors -----------------------------------------------------------------------
def test_replica_resources_follow_the_policy():
    assert replica_resources(DevicePolicy.only(["cuda", "cpu"])) == {"num_cpus": 1, "num_gpus": 1}
    assert replica_resources(DevicePolicy.only(["rocm"]), gpus=0.5) == {"num_cpus": 1, "num_gpus": 0.5}
    assert replica_resources(DevicePolicy.only(["cpu", "cuda"])) == {"num_cpus": 1, "num_gpus": 1}  # policy order
    assert replica_resources(DevicePolicy.only(["cpu"]), cpus=2) == {"num_cpus": 2, "num_gpus": 0}
    assert replica_resources(DevicePolicy.all()) == {"num_cpus": 1, "num_gpus": 0}
    with pytest.raises(ServeConfigError, match="gpus_per_replica must be a number >= 0"):
        replica_resources(DevicePolicy.all(), gpus=-1)
    with pytest.raises(ServeConfigError, match="above 1 must be whole GPUs"):
        replica_resources(DevicePolicy.all(), gpus=1.5)


def test_request_errors_cross_processes_with_status_and_kind():
    err = pickle.loads(pickle.dumps(as_request_error(InputError("input 'x': expected dims [4, 3]"))))
    assert isinstance(err, BadRequestError) and isinstance(err, InputError)
    assert (err.status, err.kind, str(err)) == (400, "InputError", "input 'x': expected dims [4, 3]")
    fallback = as_request_error(DeviceFallbackError([("cuda", RuntimeError("lost"))]))
    assert type(fallback) is RequestError and fallback.status == 503 and "cuda: RuntimeError: lost" in str(fallback)
    other = pickle.loads(pickle.dumps(as_request_error(ZeroDivisionError("x"))))
    assert isinstance(other, RlxError) and (other.status, other.kind, str(other)) == (500, "ZeroDivisionError",
                                                                                       "ZeroDivisionError: x")


def test_the_demo_model_matches_numpy(mlp):
    path, weights = mlp
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    for spec in (load_model(path), load_model(mlp_graph(8, weights), weights=weights, batching=True)):
        assert spec.signature.batch == 8
        compiled = Session("cpu").compile(spec.graph())
        compiled.set_params(spec.params)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], mlp_numpy(x, weights), rtol=1e-5, atol=1e-5)

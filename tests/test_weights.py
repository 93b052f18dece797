"""Weight files: safetensors (memory-mapped), .npz and raw bytes loaded into compiled
graphs, every tensor checked before any param is set; a torch state_dict saved with
safetensors loaded into the ONNX export of the same architecture; ``rlx run --weights``."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

from rlx_core import Graph, Session
from rlx_core.errors import ParamError, RlxError
from rlx_core.weights import (BytesWeightLoader, NpzLoader, SafetensorsLoader, WeightMismatchError, WeightsError,
                              load_weights, open_weights, read_weights)

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def _graph():
    """y = x @ w + b (bf16 bias), plus an i64 param that only feeds a cast."""
    g = Graph("lin")
    x = g.input("x", (2, 4))
    w, b, k = g.param("w", (4, 3)), g.param("b", (3,), "bf16"), g.param("k", (3,), "i64")
    g.set_outputs([x @ w + g.cast(b, "f32") + g.cast(k, "f32")])
    return g


@pytest.fixture
def tensors():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((4, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(ml_dtypes.bfloat16), "k": np.arange(3, dtype=np.int64)}


def _expected(t, x):
    return x @ t["w"] + t["b"].astype(np.float32) + t["k"].astype(np.float32)


def test_safetensors_file_loads_as_views_of_one_mapping(tmp_path, tensors):
    path = tmp_path / "lin.safetensors"
    safetensors_numpy.save_file(tensors, str(path))
    with SafetensorsLoader(path) as loader:
        assert loader.names() == ["k", "w", "b"]  # file order (safetensors stores wider types first)
        assert [loader.info(n).describe() for n in loader.names()] == ["[3] i64", "[4, 3] f32", "[3] bf16"]
        for name in loader.names():
            arr = loader.tensor(name)
            np.testing.assert_array_equal(arr, tensors[name])
            assert np.shares_memory(arr, loader._map) and not arr.flags.writeable  # no copy
        assert bytes(loader.tensor_bytes("w")) == tensors["w"].tobytes() and loader.tensor_bytes("nope") is None
    compiled = Session("cpu").compile(_graph())
    assert sorted(compiled.load_weights(str(path))) == ["b", "k", "w"]
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})[0], _expected(tensors, x), rtol=1e-6)


def test_unaligned_tensor_is_copied_once_into_aligned_memory(tmp_path):
    """safetensors' own writer stores wider types first, so its tensors are aligned; the
    format allows any order, as other writers use: here an f32 tensor 6 bytes in."""
    half, wide = np.arange(3, dtype=np.float16), np.arange(5, dtype=np.float32)
    header = json.dumps({"a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 6]},
                         "b": {"dtype": "F32", "shape": [5], "data_offsets": [6, 26]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + half.tobytes() + wide.tobytes())
    loader = SafetensorsLoader(path)
    np.testing.assert_array_equal(loader.tensor("a"), half)
    b = loader.tensor("b")
    assert b.flags.aligned and not np.shares_memory(b, loader._map)
    np.testing.assert_array_equal(b, wide)


def test_a_file_that_does_not_fit_names_every_problem_and_loads_nothing(tmp_path, tensors):
    compiled = Session("cpu").compile(_graph())
    compiled.set_param("w", np.ones((4, 3), np.float32))
    bad = {"w": tensors["w"].T.copy(), "b": tensors["b"].astype(np.float32), "extra": np.zeros(2, np.float32)}
    path = tmp_path / "bad.safetensors"
    safetensors_numpy.save_file(bad, str(path))
    with pytest.raises(WeightMismatchError) as e:
        compiled.load_weights(path)
    text = str(e.value)
    assert "nothing was loaded" in text
    assert "missing  k: expected [3] i64" in text
    assert "extra    extra: [2] f32 (no such param)" in text
    assert "mismatch w: expected [4, 3] f32, found [3, 4] f32" in text
    assert "mismatch b: expected [3] bf16, found [3] f32" in text
    assert isinstance(e.value, ParamError) and isinstance(e.value, RlxError)
    assert [n for n, _ in e.value.missing] == ["k"] and len(e.value.mismatched) == 2
    with pytest.raises(ParamError, match=r"param\(s\) \['b', 'k'\] .* were never set"):
        compiled.run({"x": np.zeros((2, 4), np.float32)})  # b (right dims) was not set either
    compiled.set_params({"b": np.zeros(3, ml_dtypes.bfloat16), "k": np.zeros(3, np.int64)})
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(compiled.run({"x": x})[0], np.full((2, 3), 4.0))  # w kept its ones


def test_rename_maps_and_skips_and_strict_false_ignores_extras(tmp_path, tensors):
    path = tmp_path / "prefixed.safetensors"
    safetensors_numpy.save_file({f"model.{k}": v for k, v in tensors.items()} | {"opt.step": np.zeros(1)},
                                str(path))
    compiled = Session("cpu").compile(_graph())
    strip = lambda n: n.removeprefix("model.") if n.startswith("model.") else None  # noqa: E731
    assert sorted(compiled.load_weights(path, rename=strip)) == ["b", "k", "w"]
    mapping = {f"model.{k}": k for k in tensors}
    with pytest.raises(WeightMismatchError, match=r"extra    opt.step: \[1\] f64"):
        compiled.load_weights(path, rename=mapping)
    assert len(compiled.load_weights(path, rename=mapping, strict=False)) == 3
    with pytest.raises(WeightMismatchError, match="both 'model.(w|b)' and 'model.(w|b)' rename to it"):
        compiled.load_weights(path, rename={"model.w": "w", "model.b": "w"}, strict=False)
    with pytest.raises(WeightsError, match="rename gave 3"):
        compiled.load_weights(path, rename=lambda n: 3)


def test_npz_headers_are_checked_before_data_is_read(tmp_path, tensors):
    plain = {k: v for k, v in tensors.items() if k != "b"}  # (npz cannot hold bfloat16)
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, **plain)
        loader = open_weights(path)
        assert isinstance(loader, NpzLoader) and loader.info("w").describe() == "[4, 3] f32"
        g = Graph("no_b")
        x = g.input("x", (2, 4))
        g.set_outputs([x @ g.param("w", (4, 3)) + g.cast(g.param("k", (3,), "i64"), "f32")])
        compiled = Session("cpu").compile(g)
        compiled.load_weights(loader)
        x = np.ones((2, 4), np.float32)
        np.testing.assert_allclose(compiled.run({"x": x})[0], x @ plain["w"] + plain["k"], rtol=1e-6)
    np.savez(tmp_path / "obj.npz", o=np.array([{}], dtype=object))
    with pytest.raises(WeightsError, match="'o' is an object array"):
        NpzLoader(tmp_path / "obj.npz")


def test_bytes_loader_is_the_seeds_untyped_pairs(tensors):
    loader = BytesWeightLoader.from_pairs([(k, v.tobytes()) for k, v in tensors.items()])
    assert loader.names() == ["w", "b", "k"] and loader.info("b").describe() == "6 bytes"
    assert bytes(loader.tensor_bytes("k")) == tensors["k"].tobytes()
    values = read_weights(_graph(), loader)
    for k, v in tensors.items():
        np.testing.assert_array_equal(values[k], v)
    short = BytesWeightLoader.from_pairs([("w", b"\0" * 40), ("b", tensors["b"].tobytes()),
                                          ("k", tensors["k"].tobytes())])
    with pytest.raises(WeightMismatchError, match=r"mismatch w: expected \[4, 3\] f32, found 40 bytes"):
        read_weights(_graph(), short)
    with pytest.raises(WeightsError, match="'w' is given twice"):
        BytesWeightLoader.from_pairs([("w", b""), ("w", b"")])


def test_unreadable_files_raise_weights_errors(tmp_path):
    (tmp_path / "junk.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0{not json}      ")
    with pytest.raises(WeightsError, match="junk.safetensors"):
        SafetensorsLoader(tmp_path / "junk.safetensors")
    with pytest.raises(WeightsError, match="cannot read safetensors file"):
        SafetensorsLoader(tmp_path / "absent.safetensors")
    with pytest.raises(WeightsError, match="cannot tell the format"):
        open_weights(tmp_path / "model.bin")
    with pytest.raises(WeightsError, match="expected a WeightLoader or a file path, got int"):
        load_weights(None, 3)


@pytest.fixture
def torch_models(tmp_path):
    """The ONNX export of one torch MLP (seed 0) and a safetensors state_dict of another
    (seed 1) of the same architecture; returns (onnx path, weights path, seed-1 module)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    safetensors_torch = pytest.importorskip("safetensors.torch")

    def mlp(seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                   torch.nn.Linear(32, 4)).eval()
    onnx_path, weights = tmp_path / "mlp.onnx", tmp_path / "mlp.safetensors"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation warning
        torch.onnx.export(mlp(0), (torch.randn(3, 16),), str(onnx_path), dynamo=False, input_names=["x"],
                          output_names=["y"])
    trained = mlp(1)
    safetensors_torch.save_file(trained.state_dict(), str(weights))
    return onnx_path, weights, trained


def test_torch_state_dict_loads_into_the_imported_onnx_model(torch_models):
    import torch

    from rlx_core.frontends.onnx import load_onnx
    onnx_path, weights, trained = torch_models
    model = load_onnx(str(onnx_path))
    compiled = Session("cpu").compile(model.graph)
    assert sorted(compiled.load_weights(weights)) == sorted(trained.state_dict())
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    with torch.no_grad():
        expected = trained(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(compiled.run({"x": x})[0], expected, rtol=1e-5, atol=1e-5)


def test_rlx_run_with_weights(torch_models, tmp_path, capsys):
    import torch

    from rlx_core.cli import main
    onnx_path, weights, trained = torch_models
    x = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", str(onnx_path), "--weights", str(weights), "--input", f"x={tmp_path / 'x.npy'}",
                 "--device", "cpu", "--repeat", "1", "--save", str(out)]) == 0
    assert f"weights {weights}: 6 tensors" in capsys.readouterr().out
    with torch.no_grad():
        np.testing.assert_allclose(np.load(out)["y"], trained(torch.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-5)
    wrong = tmp_path / "wrong.safetensors"
    safetensors_numpy.save_file({"0.weight": np.zeros((16, 32), np.float32)}, str(wrong))
    assert main(["run", str(onnx_path), "--weights", str(wrong), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "WeightMismatchError" in err and "mismatch 0.weight: expected [32, 16] f32, found [16, 32] f32" in err
    assert "missing  3.bias: expected [4] f32" in err


def test_weights_load_their_libraries_on_first_use():
    probe = ("import json, sys, rlx_core, rlx_core.weights; print(json.dumps([m for m in "
             "('rlx_core.weights', 'safetensors', 'gguf') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["rlx_core.weights"]
    bare = subprocess.run([sys.executable, "-c", "import sys, rlx_core; print('rlx_core.weights' in sys.modules)"],
                          capture_output=True, text=True, check=True).stdout
    assert bare.strip() == "False"

"""External-data ONNX models (weights beside the model, ``onnx.save_model(...,
save_as_external_data=True)``): read with ONNX's conventions (location, offset,
length), memory-mapped, and only from inside the model's folder."""
from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_core.frontends.onnx import ModelDataError, load_onnx, load_onnx_for  # noqa: E402

F = TensorProto.FLOAT


def _weights():
    rng = np.random.default_rng(0)
    return rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal(32).astype(np.float32)


def save_external(ox, folder, *, one_file=True):
    """A MatMul + Add model saved in ``folder`` with both weights in external data."""
    w, b = _weights()
    model = ox.make_model([helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
                          [("x", F, [2, 64])], [("y", F, [2, 32])],
                          initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location="weights.bin" if one_file else None, size_threshold=0)
    return path


def rewrite_location(path, tensor: str, location: str) -> None:
    """Point ``tensor``'s external data at ``location`` (as a hostile model would)."""
    model = onnx.load(str(path), load_external_data=False)
    init = next(t for t in model.graph.initializer if t.name == tensor)
    next(e for e in init.external_data if e.key == "location").value = location
    path.write_bytes(model.SerializeToString())


def _mapped(arr: np.ndarray) -> bool:
    while arr is not None and not isinstance(arr, mmap.mmap):
        arr = getattr(arr, "base", None) if isinstance(arr, np.ndarray) else getattr(arr, "obj", None)
    return isinstance(arr, mmap.mmap)


@pytest.mark.parametrize("one_file", [True, False])
def test_tensors_load_at_their_offsets_memory_mapped(ox, tmp_path, one_file):
    path = save_external(ox, tmp_path, one_file=one_file)
    w, b = _weights()
    m = load_onnx(path)
    np.testing.assert_array_equal(m.params["w"], w)
    np.testing.assert_array_equal(m.params["b"], b)
    assert _mapped(m.params["w"]) and not m.params["w"].flags.writeable  # no copy of the weights
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(ox.run_rlx(path, {"x": x})[0], x @ w + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ox.run_rlx(path, {"x": x}, initializers="constants")[0], x @ w + b, rtol=1e-5,
                               atol=1e-5)
    assert load_onnx_for(path, {"x": x}).params.keys() == {"w", "b"}


def test_a_model_proto_reads_external_data_from_base_dir(ox, tmp_path):
    path = save_external(ox, tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ModelDataError, match=r"initializer '\w' keeps its data in the external file 'weights.bin', "
                                             r"but the model's folder is unknown"):
        load_onnx(proto)
    np.testing.assert_array_equal(load_onnx(proto, base_dir=tmp_path).params["w"], _weights()[0])
    np.testing.assert_array_equal(load_onnx(onnx.load(str(path))).params["w"], _weights()[0])  # loaded by onnx


@pytest.mark.parametrize("location, match", [
    ("/etc/passwd", r"is absolute"),
    ("../outside/weights.bin", r"climbs out with '\.\.'"),
    ("sub/../../outside/weights.bin", r"climbs out with '\.\.'"),
    ("", r"is not a file name"),
])
def test_locations_outside_the_models_folder_are_refused(ox, tmp_path, location, match):
    path = save_external(ox, tmp_path / "model")
    save_external(ox, tmp_path / "outside")
    rewrite_location(path, "w", location)
    with pytest.raises(ModelDataError, match=r"initializer 'w': external data location .*" + match):
        load_onnx(path)


def test_symlinks_may_not_lead_out_of_the_folder(ox, tmp_path):
    path = save_external(ox, tmp_path / "model")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.zeros(64 * 32, np.float32).tobytes())
    os.symlink(secret, tmp_path / "model" / "leak.bin")
    rewrite_location(path, "w", "leak.bin")
    with pytest.raises(ModelDataError, match=r"external data location 'leak.bin' resolves \(through a symbolic "
                                             r"link\) to .*secret.bin', outside the model's folder"):
        load_onnx(path)
    # a link that stays inside the folder is fine
    os.makedirs(tmp_path / "model" / "data")
    os.replace(tmp_path / "model" / "weights.bin", tmp_path / "model" / "data" / "weights.bin")
    os.symlink("data/weights.bin", tmp_path / "model" / "weights.bin")
    rewrite_location(path, "w", "weights.bin")
    np.testing.assert_array_equal(load_onnx(path).params["w"], _weights()[0])


def test_data_past_the_end_or_of_the_wrong_size_are_refused(ox, tmp_path):
    path = save_external(ox, tmp_path)
    data = tmp_path / "weights.bin"
    full = data.read_bytes()
    data.write_bytes(full[:-16])  # truncated: b (stored last) runs past the end
    with pytest.raises(ModelDataError, match=r"initializer 'b': external data 'weights.bin' at offset \d+ for 128 "
                                             r"bytes runs past the end of the file"):
        load_onnx(path)
    data.write_bytes(full)
    model = onnx.load(str(path), load_external_data=False)
    init = next(t for t in model.graph.initializer if t.name == "b")
    next(e for e in init.external_data if e.key == "length").value = "64"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelDataError, match=r"initializer 'b' declares dims \[32\] \(32 elements, 128 bytes of "
                                             r"external data\), but its data hold 64 bytes"):
        load_onnx(path)


def test_a_missing_data_file_names_it(ox, tmp_path):
    path = save_external(ox, tmp_path)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelDataError, match=r"cannot read external data file '.*weights.bin'"):
        load_onnx(path)

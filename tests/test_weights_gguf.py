"""GGUF files written by gguf.GGUFWriter: plain tensors as views of the file's mapping,
q8_0/q4_0/q4_1 kept as blocks and dequantized in the graph (equal to
gguf.quants.dequantize bit for bit, on the reference interpreter and rlx-cpu), other
quantized types dequantized on load when asked."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from rlx_core import Graph, Session, evaluate
from rlx_core.errors import ShapeError
from rlx_core.weights import (BLOCK_FORMATS, GGUFLoader, WeightMismatchError, WeightsError, block_param,
                              open_weights, read_weights)

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType
DIMS = (8, 64)


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    return {"plain.f32": rng.standard_normal((3, 5)).astype(np.float32),
            "plain.f16": rng.standard_normal((4,)).astype(np.float16),
            "plain.bf16": rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16),
            "plain.i32": np.arange(6, dtype=np.int32).reshape(2, 3),
            **{f"w.{k}": rng.standard_normal(DIMS).astype(np.float32) for k in ("q8_0", "q4_0", "q4_1", "q5_0")}}


@pytest.fixture(scope="module")
def path(weights, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("llama.block_count", 1)
    for name, value in weights.items():
        kind = name.split(".")[1]
        if kind == "bf16":
            writer.add_tensor(name, value.view(np.uint16), raw_dtype=Q.BF16)
        elif kind.startswith("q"):
            blocks = gguf.quants.quantize(value, getattr(Q, kind.upper()))
            writer.add_tensor(name, blocks, raw_shape=blocks.shape, raw_dtype=getattr(Q, kind.upper()))
        else:
            writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def dequantized(path):
    """What gguf itself makes of each quantized tensor."""
    return {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in gguf.GGUFReader(str(path)).tensors
            if t.tensor_type.name.startswith("Q")}


def test_plain_tensors_are_views_of_the_mapped_file(path, weights):
    loader = open_weights(path)
    assert isinstance(loader, GGUFLoader) and loader.metadata["llama.block_count"] == 1
    for name in ("plain.f32", "plain.f16", "plain.bf16", "plain.i32"):
        arr = loader.tensor(name)
        assert arr.dtype == weights[name].dtype and arr.shape == weights[name].shape  # GGUF's dims reversed back
        np.testing.assert_array_equal(arr, weights[name])
        assert isinstance(arr.base, np.ndarray) and not arr.flags.writeable  # a view of the file's memmap
    assert loader.info("plain.bf16").describe() == "[2, 3] bf16"


def test_block_formats_are_split_into_their_parts(path):
    loader = GGUFLoader(path)
    assert [n for n in loader.names() if n.startswith("w.")] == [
        "w.q8_0.d", "w.q8_0.qs", "w.q4_0.d", "w.q4_0.qs", "w.q4_1.d", "w.q4_1.m", "w.q4_1.qs", "w.q5_0"]
    assert loader.info("w.q8_0.qs").describe() == "[16, 32] i8" and loader.info("w.q4_0.qs").describe() == "[16, 16] u8"
    assert loader.info("w.q4_1.m").describe() == "[16] f16"
    assert loader.info("w.q5_0").describe() == "[8, 64] q5_0"  # no in-graph form: its own type
    with pytest.raises(WeightsError, match="q5_0 blocks, .*dequantize=True"):
        loader.tensor("w.q5_0")


def _block_graph(kinds):
    g = Graph("blocks")
    g.set_outputs([block_param(g, f"w.{k}", DIMS, k) for k in kinds])
    return g


@pytest.mark.parametrize("kind", list(BLOCK_FORMATS))
def test_blocks_dequantized_in_the_graph_equal_ggufs_own(path, dequantized, weights, kind):
    g = _block_graph([kind])
    loader = GGUFLoader(path)
    values = read_weights(g, loader, strict=False)
    stored = sum(v.nbytes for v in values.values())
    assert stored == DIMS[0] * DIMS[1] // 32 * BLOCK_FORMATS[kind].nbytes  # the blocks, not f32
    (ref,) = evaluate(g, {}, values)
    np.testing.assert_array_equal(np.asarray(ref), dequantized[f"w.{kind}"])
    compiled = Session("cpu").compile(g)
    compiled.load_weights(loader, strict=False)
    np.testing.assert_array_equal(compiled.run({})[0], dequantized[f"w.{kind}"])
    assert np.abs(dequantized[f"w.{kind}"] - weights[f"w.{kind}"]).max() < 0.25  # (it is a quantization)


def test_a_quantized_matmul_runs_from_the_blocks(path, dequantized):
    g = Graph("qmm")
    x = g.input("x", (2, DIMS[1]))
    g.set_outputs([x @ g.transpose(block_param(g, "w.q4_0", DIMS, "q4_0"))])
    compiled = Session("cpu").compile(g)
    compiled.load_weights(path, rename=lambda n: n if n.startswith("w.q4_0.") else None)
    xv = np.random.default_rng(1).standard_normal((2, DIMS[1])).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": xv})[0], xv @ dequantized["w.q4_0"].T, rtol=1e-5, atol=1e-5)


def test_f32_params_say_how_to_load_quantized_tensors(path, dequantized):
    g = Graph("dense")
    g.set_outputs([g.param("w.q8_0", DIMS) * 1.0, g.param("w.q5_0", DIMS) * 1.0])
    compiled = Session("cpu").compile(g)
    with pytest.raises(WeightMismatchError) as e:
        compiled.load_weights(path, strict=False)
    text = str(e.value)
    assert ("missing  w.q8_0: expected [8, 64] f32; the file holds it as q8_0 blocks ('w.q8_0.d', 'w.q8_0.qs'): "
            "declare it with rlx_core.weights.block_param(g, 'w.q8_0', dims, 'q8_0')") in text
    assert "mismatch w.q5_0: expected [8, 64] f32, found [8, 64] q5_0" in text
    compiled.load_weights(path, strict=False, dequantize=True)  # every quantized tensor expanded to f32
    a, b = compiled.run({})
    np.testing.assert_array_equal(a, dequantized["w.q8_0"])
    np.testing.assert_array_equal(b, dequantized["w.q5_0"])


def test_block_param_checks_its_arguments():
    with pytest.raises(ShapeError, match="last dim must be a multiple of 32"):
        block_param(Graph("g"), "w", (4, 30), "q8_0")
    with pytest.raises(WeightsError, match="no in-graph dequantization for GGML type 'q4_k'"):
        block_param(Graph("g"), "w", (4, 256), "q4_k")


def test_a_file_that_is_not_gguf_is_a_weights_error(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(WeightsError, match="x.gguf"):
        GGUFLoader(tmp_path / "x.gguf")

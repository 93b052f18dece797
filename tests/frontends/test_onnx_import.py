"""The importer's contract: what becomes inputs, params and constants, import-time
folding and specialization, external data, and the errors for what it cannot map."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_core.errors import FrontendError  # noqa: E402
from rlx_core.frontends.onnx import (ConstantRequiredError, MIN_OPSET, load_onnx, load_onnx_for,  # noqa: E402
                                     max_opset)

F = TensorProto.FLOAT


def test_initializers_become_params_or_constants(ox):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    steps = np.array([1], np.int64)
    model = ox.make_model([helper.make_node("MatMul", ["x", "w"], ["y"]),
                           helper.make_node("Cast", ["steps"], ["steps_f"], to=F),
                           helper.make_node("Add", ["y", "steps_f"], ["z"])],
                          [("x", F, [4, 2])], [("z", F, [4, 3])],
                          initializers=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(steps, "steps")])
    m = load_onnx(model)
    assert m.input_names == ["x"] and m.output_names == ["z"] and m.opset == 18
    assert list(m.params) == ["w"] and m.graph.param_names == ["w"]  # integer initializers are constants
    np.testing.assert_array_equal(m.params["w"], w)
    constants = load_onnx(model, initializers="constants")
    assert constants.params == {} and constants.graph.param_names == []


def test_shape_arithmetic_is_folded_at_import_time(ox):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what exporters emit for a
    flatten) leaves a single reshape in the graph."""
    model = ox.make_model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
         helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [("x", F, [2, 3, 4])], [("y", F, [2, 12])],
        initializers=[numpy_helper.from_array(np.array(0, np.int64), "zero"),
                      numpy_helper.from_array(np.array([0], np.int64), "axes"),
                      numpy_helper.from_array(np.array([-1], np.int64), "minus_one")])
    m = load_onnx(model)
    assert [n.kind for n in m.graph.nodes] == ["input", "reshape"]
    ox.assert_matches_onnxruntime(model, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)})


def test_a_shape_given_as_input_needs_specialization(ox):
    shape = np.array([3, -1], np.int64)
    model = ox.make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                          [("x", F, [2, 3, 2]), ("shape", TensorProto.INT64, [2])], [("y", F, [3, 4])])
    with pytest.raises(ConstantRequiredError, match=r"ONNX node 'y' \(Reshape, opset 18\): input 1 \('shape'\) "
                                                    r"must be a constant known at import time") as err:
        load_onnx(model)
    assert err.value.value_name == "shape"
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    m = load_onnx_for(model, {"x": x, "shape": shape})
    assert m.input_names == ["x"]  # the shape is frozen into the graph
    frozen = load_onnx(model, constants={"shape": shape})
    assert frozen.input_names == ["x"] and frozen.graph.output_shapes[0].dims == (3, 4)
    np.testing.assert_array_equal(ox.run_rlx(model, {"x": x}, constants={"shape": shape})[0], x.reshape(3, 4))


def test_specialization_never_freezes_float_data(ox):
    """A Range over float bounds computed from a float input stays unsupported."""
    model = ox.make_model([helper.make_node("ReduceMax", ["x"], ["hi"], keepdims=0),
                           helper.make_node("Range", ["zero", "hi", "one"], ["y"])],
                          [("x", F, [3])], [("y", F, [5])],
                          initializers=[numpy_helper.from_array(np.array(0, np.float32), "zero"),
                                        numpy_helper.from_array(np.array(1, np.float32), "one")])
    with pytest.raises(ConstantRequiredError, match=r"\(Range, opset 18\): input 1 \('hi'\)"):
        load_onnx_for(model, {"x": np.array([1, 5, 2], np.float32)})


def test_symbolic_dims_need_input_shapes(ox):
    model = ox.make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 4])], [("y", F, ["batch", 4])])
    with pytest.raises(FrontendError, match=r"graph input 'x' has a symbolic dimension 'batch'.*input_shapes"):
        load_onnx(model)
    assert load_onnx(model, input_shapes={"x": (5, 4)}).graph.output_shapes[0].dims == (5, 4)
    assert load_onnx_for(model, {"x": np.ones((2, 4), np.float32)}).graph.output_shapes[0].dims == (2, 4)


def test_external_data_loads_from_the_models_folder(ox, tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    model = ox.make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [2, 64])], [("y", F, [2, 32])],
                          initializers=[numpy_helper.from_array(w, "w")])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == w.nbytes
    m = load_onnx(path)
    np.testing.assert_array_equal(m.params["w"], w)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(ox.run_rlx(path, {"x": x})[0], x @ w, rtol=1e-5, atol=1e-5)


# --- errors -----------------------------------------------------------------------------
def test_unsupported_op_type_names_the_node_op_type_and_opset(ox):
    model = ox.make_model([helper.make_node("NonZero", ["x"], ["y"], name="find")], [("x", F, [4])],
                          [("y", TensorProto.INT64, [1, "n"])])
    with pytest.raises(FrontendError, match=r"ONNX node 'find' \(NonZero, opset 18\): op type NonZero .*not "
                                            r"supported by the RLX importer"):
        load_onnx(model)


def test_unsupported_attribute_values_are_declined_not_approximated(ox):
    model = ox.make_model([helper.make_node("Dropout", ["x", "ratio", "training"], ["y"], name="drop")],
                          [("x", F, [4])], [("y", F, [4])],
                          initializers=[numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
                                        numpy_helper.from_array(np.array(True), "training")])
    with pytest.raises(FrontendError, match=r"'drop' \(Dropout, opset 18\): not supported by the RLX importer: "
                                            r"training-mode Dropout"):
        load_onnx(model)


def test_bad_models_raise_frontend_errors(ox, tmp_path):
    old = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "old",
                                              [helper.make_tensor_value_info("x", F, [2])],
                                              [helper.make_tensor_value_info("y", F, [2])]),
                            opset_imports=[helper.make_opsetid("", 11)])
    with pytest.raises(FrontendError, match=f"model uses opset 11; RLX imports opsets {MIN_OPSET} to {max_opset()}"):
        load_onnx(old)
    custom = ox.make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    custom.graph.node[0].domain = "com.example"
    with pytest.raises(FrontendError, match="uses domain 'com.example'; only the default domain"):
        load_onnx(custom)
    mismatched = ox.make_model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                               [("a", F, [2, 3]), ("b", F, [4, 5])], [("y", F, [2, 5])])
    with pytest.raises(FrontendError, match=r"'mm' \(MatMul, opset 18\): ShapeError: .*contraction sizes differ"):
        load_onnx(mismatched)
    u16 = ox.make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.UINT16, [2])],
                        [("y", TensorProto.UINT16, [2])])
    with pytest.raises(FrontendError, match="ONNX element type UINT16 has no RLX dtype"):
        load_onnx(u16)
    with pytest.raises(FrontendError, match="cannot read ONNX model"):
        load_onnx(tmp_path / "missing.onnx")
    with pytest.raises(FrontendError, match=r"constants given for \['nope'\], which are not graph inputs"):
        load_onnx(custom, constants={"nope": np.zeros(2)})
    with pytest.raises(FrontendError, match="initializers must be 'params' or 'constants'"):
        load_onnx(custom, initializers="weights")


class _AddOnly:
    """Just enough of a backend for legalize: it runs f32 `add` and nothing else."""

    name = "add-only"

    def supported_ops(self):
        from rlx_core import DType
        return {"add": frozenset({DType.F32}), "constant": None}

    def check_node(self, node):
        return None


def test_compile_time_rejections_name_the_onnx_node(ox):
    """An imported graph's unsupported node is named by its ONNX node as well as its IR
    node, also after the precision pass has rebuilt the graph."""
    from rlx_core.errors import UnsupportedOpError
    from rlx_core.passes.legalize import legalize_for_backend
    from rlx_core.passes.precision import apply_precision
    model = ox.make_model([helper.make_node("Add", ["x", "x"], ["s"], name="node_add"),
                           helper.make_node("Equal", ["ids", "ids"], ["y"], name="node_eq")],
                          [("x", F, [4]), ("ids", TensorProto.INT64, [4])],
                          [("s", F, [4]), ("y", TensorProto.BOOL, [4])])
    graph = load_onnx(model).graph
    for g in (graph, apply_precision(graph, "f16")):
        with pytest.raises(UnsupportedOpError) as err:
            legalize_for_backend(g, _AddOnly())
        labels = [label for label, _ in err.value.offending]
        assert all("(ONNX node 'node_" in label for label in labels if " cast" not in label), labels
        assert any(" eq (ONNX node 'node_eq' (Equal, opset 18))" in label for label in labels), labels
        assert "ONNX node 'node_eq'" in str(err.value)

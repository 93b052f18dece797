"""Models that lie: initializer data that do not fit their dims, import-time folding
asked to build terabytes, Range with delta 0, out-of-range indices in the composite
index ops, a wrong argument -- each a ``FrontendError`` (or ``InputError`` at run time)
naming the tensor or node, never a numpy error or a multi-terabyte allocation."""
from __future__ import annotations

import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_core import InputError, Session  # noqa: E402
from rlx_core.errors import FrontendError  # noqa: E402
from rlx_core.frontends.onnx import FrontendArgumentError, ModelDataError, load_onnx  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
HUGE = 2**40  # elements: terabytes if ever allocated


def unchecked_model(nodes, inputs, outputs, initializers=(), opset=18):
    """A model built without ``onnx.checker`` (which would refuse some of these lies)."""
    graph = helper.make_graph(nodes, "lies", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def identity_of(init: TensorProto, out_dims):
    return unchecked_model([helper.make_node("Identity", [init.name], ["y"])], [], [("y", init.data_type, out_dims)],
                           [init])


# --- initializer data that do not fit their dims -----------------------------------------
def test_raw_data_of_the_wrong_size_names_the_tensor():
    init = numpy_helper.from_array(np.zeros(6, np.float32), "w")
    init.dims[:] = [3, 3]
    with pytest.raises(ModelDataError, match=r"initializer 'w' declares dims \[3, 3\] \(9 elements, 36 bytes of "
                                             r"raw_data\), but its data hold 24 bytes of raw_data") as e:
        load_onnx(identity_of(init, [3, 3]))
    assert isinstance(e.value, FrontendError) and isinstance(e.value, ValueError)


def typed_tensor(name, data_type, dims, field, values):
    """A tensor whose typed field holds ``values`` whatever ``dims`` says (make_tensor checks)."""
    t = TensorProto(name=name, data_type=data_type, dims=dims)
    getattr(t, field).extend(values)
    return t


def test_typed_field_of_the_wrong_length_names_the_tensor():
    init = typed_tensor("bias", F, [2, 3], "float_data", [1.0] * 5)
    with pytest.raises(ModelDataError, match=r"initializer 'bias' declares dims \[2, 3\] .* 5 entries of float_data"):
        load_onnx(identity_of(init, [2, 3]))
    ints = typed_tensor("steps", I64, [4], "int64_data", [1, 2, 3, 4, 5])  # integers become constants: checked too
    with pytest.raises(ModelDataError, match=r"initializer 'steps' .* 5 entries of int64_data"):
        load_onnx(identity_of(ints, [4]))


# --- folding is bounded ---------------------------------------------------------------------
def _timed_import(model):
    t0 = time.perf_counter()
    m = load_onnx(model, initializers="constants")  # float initializers too: all inputs are known
    assert time.perf_counter() - t0 < 20, "the import computed something huge"
    return m


def test_constant_of_shape_above_the_limit_stays_a_runtime_expand():
    shape = numpy_helper.from_array(np.array([HUGE, 1024], np.int64), "shape")
    m = _timed_import(unchecked_model([helper.make_node("ConstantOfShape", ["shape"], ["y"])], [],
                                      [("y", F, [HUGE, 1024])], [shape]))
    assert m.graph.output_shapes[0].dims == (HUGE, 1024) and "expand" in m.graph.kinds()
    small = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    m = load_onnx(unchecked_model([helper.make_node("ConstantOfShape", ["shape"], ["y"])], [], [("y", F, [2, 3])],
                                  [small]))
    assert m.graph.kinds() == {"constant"}  # below the limit: folded as before


def test_constant_of_shape_with_a_negative_dim_is_refused():
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    with pytest.raises(ModelDataError, match=r"ONNX node 'fill' \(ConstantOfShape, opset 18\): .*negative"):
        load_onnx(unchecked_model([helper.make_node("ConstantOfShape", ["shape"], ["y"], name="fill")], [],
                                  [("y", F, [2])], [shape]))


def _range_model(start, limit, delta, dtype=np.int64):
    inits = [numpy_helper.from_array(np.array(v, dtype), n) for n, v in
             (("start", start), ("limit", limit), ("delta", delta))]
    return unchecked_model([helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="r")], [],
                           [("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)], inits)


def test_range_above_the_limit_stays_a_runtime_arange():
    m = _timed_import(_range_model(5, 5 + 3 * HUGE, 3))
    assert m.graph.output_shapes[0].dims == (HUGE,) and "arange" in m.graph.kinds()
    # the runtime form computes what the folded one does (checked on a small range by hand)
    from rlx_core.frontends import onnx as front
    limit = front.FOLD_LIMIT_BYTES
    try:
        front.FOLD_LIMIT_BYTES = 16
        for args, dtype in (((7, -20, -3), np.int64), ((0.5, 4.0, 0.75), np.float32), ((3, 40, 7), np.int32)):
            runtime = load_onnx(_range_model(*args, dtype=dtype), initializers="constants")
            assert "arange" in runtime.graph.kinds()
            got = Session("cpu").compile(runtime.graph).run({})[0]
            front.FOLD_LIMIT_BYTES = limit
            want = load_onnx(_range_model(*args, dtype=dtype), initializers="constants").graph.nodes[-1].attrs["value"]
            front.FOLD_LIMIT_BYTES = 16
            np.testing.assert_array_equal(got, want)
    finally:
        front.FOLD_LIMIT_BYTES = limit


@pytest.mark.parametrize("args, match", [((0, 10, 0), r"Range delta is 0"),
                                         ((0.0, np.inf, 1.0), r"has no finite length")])
def test_range_without_an_end_names_the_node(args, match):
    with pytest.raises(ModelDataError, match=r"ONNX node 'r' \(Range, opset 18\): .*" + match):
        load_onnx(_range_model(*args, dtype=np.float32 if isinstance(args[0], float) else np.int64),
                  initializers="constants")


def test_tile_above_the_limit_is_not_folded():
    x = numpy_helper.from_array(np.ones((4, 4), np.float32), "x")
    reps = numpy_helper.from_array(np.array([2**19, 2**19], np.int64), "reps")
    m = _timed_import(unchecked_model([helper.make_node("Tile", ["x", "reps"], ["y"])], [],
                                      [("y", F, [2**21, 2**21])], [x, reps]))
    assert m.graph.output_shapes[0].dims == (2**21, 2**21) and "expand" in m.graph.kinds()


def _counting_loop(trips: int):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["v", "one"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []), helper.make_tensor_value_info("v", F, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [])],
        initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"), numpy_helper.from_array(np.array(True), "c"),
             numpy_helper.from_array(np.array(0.0, np.float32), "v0")]
    return unchecked_model([helper.make_node("Loop", ["M", "c", "v0"], ["v"], body=body)], [], [("v", F, [])], inits)


def test_loop_trip_count_bounds_folding():
    folded = load_onnx(_counting_loop(5), initializers="constants")
    assert folded.graph.kinds() == {"constant"} and folded.graph.nodes[-1].attrs["value"] == 5.0
    m = _timed_import(_counting_loop(10**12))  # evaluated at import it would run for days
    assert m.graph.kinds() & {"scan", "while"}
    assert "arange" in m.graph.kinds()  # the iteration numbers are not a 8 TB constant either


# --- arguments and composite index ops ----------------------------------------------------
@pytest.mark.parametrize("bad", [5, None, b"\x08\x01"])
def test_load_onnx_names_a_wrong_argument(bad):
    with pytest.raises(FrontendArgumentError, match=r"model must be a path .* or an onnx.ModelProto, got") as e:
        load_onnx(bad)
    assert isinstance(e.value, FrontendError) and isinstance(e.value, TypeError)


def _index_model(op_type, data_dims, index_dims, out_dims, **attrs):
    inputs = [("data", F, data_dims), ("idx", I64, index_dims)]
    names = ["data", "idx"]
    if op_type.startswith("Scatter"):
        inputs.append(("upd", F, index_dims[:-1] if op_type == "ScatterND" else index_dims))
        names.append("upd")
    return unchecked_model([helper.make_node(op_type, names, ["y"], name="ix", **attrs)], inputs,
                           [("y", F, out_dims)])


@pytest.mark.parametrize("op_type, idx", [
    ("GatherND", [[0, 7]]),        # column 1 is 7 in an axis of 5: flat row 7 exists, the index does not
    ("GatherND", [[3, 0]]),
    ("ScatterND", [[0, 5]]),
    ("ScatterElements", [[0, 9, 1]]),
])
def test_composite_index_ops_check_each_axis(op_type, idx):
    idx = np.array(idx, np.int64)
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    out_dims = [idx.shape[0]] if op_type == "GatherND" else [3, 5]
    m = load_onnx(_index_model(op_type, [3, 5], list(idx.shape), out_dims, **({"axis": 1} if "Elements" in op_type
                                                                                else {})))
    feeds = {"data": data, "idx": idx}
    if op_type.startswith("Scatter"):
        feeds["upd"] = np.ones(idx.shape[:-1] if op_type == "ScatterND" else idx.shape, np.float32)
    compiled = Session("cpu").compile(m.graph)
    with pytest.raises(InputError, match=r"gather .*ONNX node 'ix'.*: index \d+ is out of range for axis 0 of "
                                         r"size [35]"):
        compiled.run(feeds)

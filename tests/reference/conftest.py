"""Fixtures shared by the checks of reference kernels against libraries nobody here wrote."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="session")
def onnx_node():
    """``run(op_type, inputs, n_outputs=1, opset=18, **attrs)``: a one-node ONNX model on
    onnxruntime's CPU provider; ``inputs`` maps input names, in order, to arrays."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TypeProto, helper

    def run(op_type: str, inputs: dict[str, np.ndarray], n_outputs: int = 1, opset: int = 18, **attrs):
        outs = [f"out{i}" for i in range(n_outputs)]
        graph = helper.make_graph(
            [helper.make_node(op_type, list(inputs), outs, **attrs)], op_type,
            [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for k, v in inputs.items()],
            [helper.make_value_info(o, TypeProto()) for o in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, inputs)
    return run


@pytest.fixture(scope="session")
def reference():
    """``run(build, *arrays)``: what the reference interpreter computes for
    ``build(g, *inputs)`` on a graph whose inputs are ``arrays`` (a list if ``build``
    returns several values, else one array)."""
    from rlx_core.ir import DType, Graph
    from rlx_core.reference import evaluate

    def run(build, *arrays):
        g = Graph("reference-check")
        values = [g.input(f"in{i}", a.shape, DType.of(a.dtype)) for i, a in enumerate(arrays)]
        out = build(g, *values)
        several = isinstance(out, (list, tuple))
        g.set_outputs(list(out) if several else [out])
        res = evaluate(g, {f"in{i}": a for i, a in enumerate(arrays)})
        return res if several else res[0]
    return run

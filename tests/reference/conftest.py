"""Fixtures over ``rlx_core.testing.external`` for the reference-vs-library checks."""
from __future__ import annotations

import pytest

from rlx_core.testing.external import run_onnx_node, run_reference


@pytest.fixture(scope="session")
def onnx_node():
    """``run(op_type, inputs, n_outputs=1, opset=18, **attrs)``: a one-node ONNX model on
    onnxruntime's CPU provider; ``inputs`` maps input names, in order, to arrays."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")

    def run(op_type, inputs, n_outputs=1, opset=18, **attrs):
        return run_onnx_node(op_type, list(inputs.values()), attrs, opset=opset, n_outputs=n_outputs)
    return run


@pytest.fixture(scope="session")
def reference():
    """``run(build, *arrays)``: the reference interpreter's result for ``build(g, *inputs)``."""
    return run_reference

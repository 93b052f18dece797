"""A small model to serve: a two-layer MLP, ``y = relu(x @ w1 + b1) @ w2 + b2``, as an ONNX
file with a symbolic batch dim ``N`` or as an RLX graph of a fixed number of rows; used by
the tests, the benchmark (an RLX graph: no onnx needed on the GPU host) and the client example.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["mlp_weights", "mlp_graph", "write_mlp_onnx", "mlp_numpy"]


def mlp_weights(features: int = 16, hidden: int = 32, outputs: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = {"w1": rng.standard_normal((features, hidden)) / np.sqrt(features),
               "b1": rng.standard_normal(hidden) * 0.1,
               "w2": rng.standard_normal((hidden, outputs)) / np.sqrt(hidden),
               "b2": rng.standard_normal(outputs) * 0.1}
    return {k: v.astype(np.float32) for k, v in weights.items()}


def mlp_graph(rows: int, weights: dict[str, np.ndarray]):
    """The MLP as an RLX graph of ``rows`` rows (input ``x``, output ``y``; params by name)."""
    from rlx_core import Graph, Shape
    g = Graph("mlp")
    x = g.input("x", Shape((rows, weights["w1"].shape[0]), "f32"))
    p = {k: g.param(k, Shape(v.shape, "f32")) for k, v in weights.items()}
    h = g.relu(x @ p["w1"] + p["b1"])
    g.set_outputs([h @ p["w2"] + p["b2"]], names=["y"])
    return g


def write_mlp_onnx(path: "str | os.PathLike", features: int = 16, hidden: int = 32, outputs: int = 4,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """Write the MLP to ``path`` (input ``x`` [N, features], output ``y`` [N, outputs]);
    returns its weights."""
    from rlx_core.frontends.onnx import require_onnx
    onnx = require_onnx()
    from onnx import TensorProto, helper, numpy_helper
    weights = mlp_weights(features, hidden, outputs, seed)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", outputs])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, os.fspath(path))
    return weights


def mlp_numpy(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The MLP in numpy: what a served answer must equal."""
    h = np.maximum(x @ weights["w1"] + weights["b1"], 0)
    return h @ weights["w2"] + weights["b2"]

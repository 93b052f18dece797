"""Helpers for checking reference kernels against implementations nobody here wrote.

* :func:`run_reference` evaluates one builder call on concrete arrays with the
  reference interpreter, so a test reads ``run_reference(lambda g, x: g.relu(x), x)``.
* :func:`run_onnx_graph` / :func:`run_onnx_node` run ONNX nodes through onnxruntime.
* :func:`onnx_node_cases` yields the ONNX backend node test cases of one op type:
  the node (with its attributes) plus inputs and expected outputs computed by ONNX's
  own reference implementation.
* :func:`gpt2_block` builds a GPT-2 decoder block as a torch module (a model to export
  to ONNX and import).

onnx, onnxruntime and torch are imported lazily: they are test dependencies, not runtime ones.
"""
from __future__ import annotations

import functools
import importlib
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..reference import evaluate

__all__ = ["run_reference", "run_onnx_graph", "run_onnx_node", "onnx_node_cases", "OnnxNodeCase", "gpt2_block"]


def run_reference(build: Callable[..., Any], *arrays: np.ndarray) -> "np.ndarray | list[np.ndarray]":
    """``build(g, *values)`` on graph inputs fed with ``arrays``; its output(s) as arrays."""
    g = Graph("external-check")
    arrays = [np.asarray(a) for a in arrays]
    values = [g.input(f"x{i}", a.shape, DType.of(a.dtype)) for i, a in enumerate(arrays)]
    out = build(g, *values)
    several = isinstance(out, (list, tuple))
    g.set_outputs(list(out) if several else [out])
    res = evaluate(g, {f"x{i}": a for i, a in enumerate(arrays)})
    return res if several else res[0]


def run_onnx_graph(nodes, feeds: dict[str, np.ndarray], outputs: Sequence[str], *, opset: int,
                   domain: str = "", optimize: bool = False) -> list[np.ndarray]:
    """Run ONNX ``nodes`` as one graph on onnxruntime's CPU provider: ``feeds`` are the
    graph inputs (types taken from the arrays), ``outputs`` the names it returns. Graph
    optimizations are off unless ``optimize`` (so onnxruntime computes each node as written)."""
    import onnxruntime as ort
    from onnx import helper

    ort.set_default_logger_severity(3)
    graph = helper.make_graph(
        list(nodes), "external-check",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(list(outputs), feeds)


def run_onnx_node(op_type: str, inputs: Sequence["np.ndarray | None"], attrs: dict | None = None,
                  *, opset: int, n_outputs: int = 1, domain: str = "") -> list[np.ndarray]:
    """Run one ONNX node on onnxruntime. ``None`` inputs are omitted optional inputs
    (passed as empty names, as ONNX spells them)."""
    from onnx import helper

    names = [f"in{i}" if a is not None else "" for i, a in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **(attrs or {}))
    feeds = {n: np.asarray(a) for n, a in zip(names, inputs) if a is not None}
    return run_onnx_graph([node], feeds, outs, opset=opset, domain=domain)


@dataclass(frozen=True)
class OnnxNodeCase:
    name: str
    attrs: dict[str, Any]           # the node's attributes as Python values
    inputs: list["np.ndarray | None"]  # None where an optional input is omitted
    outputs: list[np.ndarray]


def onnx_node_cases(op_type: str, module: str | None = None) -> Iterator[OnnxNodeCase]:
    """The ONNX backend node tests of ``op_type`` (from ``onnx.backend.test.case.node``).

    Their expected outputs come from ONNX's numpy reference implementation. Cases whose
    inputs are not plain arrays (e.g. float8 tensors) are left out; function-expanded
    duplicates (``*_expanded``) too. ``module`` defaults to ``op_type.lower()``.
    """
    from onnx import helper
    import onnx.backend.test.case.node as node_cases

    start = len(node_cases._NodeTestCases)
    name = f"{node_cases.__name__}.{module or op_type.lower()}"
    if name in sys.modules:  # cases are generated while the module body runs
        importlib.reload(sys.modules[name])
    else:
        importlib.import_module(name)
    for case in node_cases._NodeTestCases[start:]:
        nodes = case.model.graph.node
        if case.name.endswith("_expanded") or "_expanded_" in case.name or len(nodes) != 1 \
                or nodes[0].op_type != op_type:
            continue
        inputs, outputs = case.data_sets[0]
        if not all(isinstance(a, (np.ndarray, np.generic)) for a in list(inputs) + list(outputs)):
            continue
        it = iter(inputs)
        full = [np.asarray(next(it)) if n else None for n in nodes[0].input]
        attrs = {a.name: helper.get_attribute_value(a) for a in nodes[0].attribute}
        yield OnnxNodeCase(case.name, attrs, full, [np.asarray(o) for o in outputs])


def gpt2_block(d: int = 32, heads: int = 4, ctx: int = 16):
    """A GPT-2 decoder block (a ``torch.nn.Module``): pre-LN causal self-attention and a
    GELU(tanh) MLP, residuals; width ``d``, ``heads`` heads, sequences up to ``ctx``."""
    return _gpt2_block_class()(d, heads, ctx)


@functools.cache
def _gpt2_block_class():
    import torch

    class GPT2Block(torch.nn.Module):
        def __init__(self, d, heads, ctx):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
            self.register_buffer("causal", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            probs = scores.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(-1)
            x = x + self.proj((probs @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    return GPT2Block

"""Evaluate a graph node by node with the reference kernels: the oracle for every op."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import GraphError, InputError, ParamError
from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.node import Node
from ..rng import RngOptions
from .kernels import get_kernel

__all__ = ["evaluate", "RefContext", "run_node"]


@dataclass
class RefContext:
    """What context kernels see: rng settings and a way to evaluate subgraphs."""

    rng: RngOptions = field(default_factory=RngOptions)
    node: Node | None = None

    def run_subgraph(self, graph: Graph, args: Sequence[np.ndarray], rng: RngOptions | None = None
                     ) -> list[np.ndarray]:
        """Evaluate ``graph`` with its inputs bound positionally to ``args``, under ``rng``
        (default: this context's options; control flow passes per-iteration ones)."""
        feeds = {n.attrs["name"]: a for n, a in zip(graph.input_nodes, args)}
        return evaluate(graph, feeds, {}, rng=rng or self.rng)


def evaluate(graph: Graph, inputs: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
             *, rng: RngOptions | None = None) -> list[np.ndarray]:
    """Run ``graph`` on host arrays; returns the outputs in ``graph.outputs`` order.

    Inputs and params must match the declared dims exactly and are converted to the
    declared dtype (the reference is lenient; ``CompiledGraph`` is strict).
    """
    inputs, params = dict(inputs or {}), dict(params or {})
    ctx = RefContext(rng=rng or RngOptions())
    values: dict[tuple[int, int], np.ndarray] = {}
    for node in graph.nodes:
        if node.kind in ("input", "param"):
            src, err = (inputs, InputError) if node.kind == "input" else (params, ParamError)
            values[(node.id, 0)] = _fetch(src, node, err)
            continue
        args = [values[r] for r in node.inputs]
        for i, out in enumerate(run_node(node, args, ctx)):
            values[(node.id, i)] = out
    if not graph.outputs:
        raise GraphError(f"graph '{graph.name}' has no outputs; call set_outputs first")
    return [values[r] for r in graph.outputs]


def run_node(node: Node, args: Sequence[np.ndarray], ctx: RefContext) -> list[np.ndarray]:
    """Run one node's reference kernel, applying the 16-bit-float rule and checking results."""
    k = get_kernel(node.kind)
    args = [a.astype(np.float32) if DType.of(a.dtype).is_low_float else a for a in args]
    with np.errstate(all="ignore"):  # inf/nan results are the defined answer, not warnings
        if k.context:
            ctx.node = node
            res = k.fn(ctx, *args, **node.attrs)
        else:
            res = k.fn(*args, **node.attrs)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(res) != len(node.outputs):
        raise GraphError(f"reference kernel for {node.label} returned {len(res)} outputs, "
                         f"expected {len(node.outputs)}")
    outs = []
    for i, (r, shape) in enumerate(zip(res, node.outputs)):
        r = np.asarray(r)
        if shape.dtype.is_low_float and r.dtype.kind == "f":
            r = r.astype(shape.dtype.np)
        if r.shape != shape.dims or r.dtype != shape.dtype.np:
            raise GraphError(f"reference kernel for {node.label} output {i} gave {list(r.shape)} {r.dtype}, "
                             f"expected {shape}")
        outs.append(r)
    return outs


def _fetch(src: dict, node: Node, err: type) -> np.ndarray:
    name = node.attrs["name"]
    if name not in src:
        raise err(f"{node.kind} '{name}' was not given (expected {list(node.attrs['dims'])} "
                  f"{node.attrs['dtype']})")
    arr = np.asarray(src[name])
    if arr.shape != tuple(node.attrs["dims"]):
        raise err(f"{node.kind} '{name}': expected dims {list(node.attrs['dims'])}, got {list(arr.shape)}")
    return arr.astype(node.attrs["dtype"].np, copy=False)

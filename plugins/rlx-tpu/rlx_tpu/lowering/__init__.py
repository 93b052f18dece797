"""Lowering RLX graphs to JAX: one rule per op kind, traced into one XLA computation.

A rule has the reference kernel's signature on JAX arrays, ``fn(*inputs, **attrs)``, or
``fn(ctx, *inputs, **attrs)`` when registered with ``context=True`` (random numbers,
subgraphs). :func:`trace_graph` calls the rules node by node inside ``jax.jit``, so
the whole graph becomes a single XLA program that XLA fuses and schedules.

Numbers follow the reference interpreter exactly as the conformance suite checks them:

* 16-bit floats are computed in f32 and rounded once per node: rules receive f16/bf16
  inputs as f32 and their float results are rounded to the node's dtype. Rules
  registered with ``low_float=True`` receive the 16-bit inputs unchanged instead and
  must give the same numbers themselves -- matmul and convolution contract 16-bit
  operands with f32 accumulation (``preferred_element_type``), which equals the f32
  product of the widened operands and keeps 16-bit matrix units in use.
* Every rule must return the node's output dims and dtype; a rule that does not is a
  bug and raises at trace time, naming the node.

Plugins add lowerings for custom op kinds (or replace built-in ones) through the
``rlx_op_kernels`` hook for backend ``"tpu"``: ``{kind: fn(*inputs, **attrs)}`` on JAX
arrays, under the same 16-bit rule.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlx_core.errors import GraphError
from rlx_core.ir import DType, Graph, Node

__all__ = ["Lowering", "LOWERINGS", "lowering", "LowerContext", "trace_graph", "draws_random", "is_low_float"]

LOW_FLOATS = (DType.F16.np, DType.BF16.np)


@dataclass(frozen=True)
class Lowering:
    kind: str
    fn: Callable
    context: bool = False
    low_float: bool = False  # receives f16/bf16 inputs as they are (see the module docstring)


LOWERINGS: dict[str, Lowering] = {}


def lowering(*kinds: str, context: bool = False, low_float: bool = False):
    """Register ``fn`` as the lowering of each of ``kinds`` (decorator)."""
    def deco(fn):
        for kind in kinds:
            if kind in LOWERINGS:
                raise GraphError(f"a lowering for '{kind}' is already registered")
            LOWERINGS[kind] = Lowering(kind, fn, context, low_float)
        return fn
    return deco


@dataclass(frozen=True)
class LowerContext:
    """What context rules see while a graph is traced.

    ``platform`` is the PJRT platform the program is compiled for; ``rng`` is the traced
    random state (``random.RngState``) of the (sub)graph being traced, None when the
    graph draws no random numbers; ``extra`` holds plugin lowerings by kind; ``node``
    is the node being lowered.
    """

    platform: str
    rng: Any = None
    extra: Mapping[str, Callable] | None = None
    node: Node | None = None

    def run_subgraph(self, graph: Graph, args: Sequence[Any], iteration) -> list[Any]:
        """Trace ``graph`` on ``args`` (by position, cast to its declared input dtypes)
        under the random state folded with ``iteration``, as the control ops define."""
        values = {n.attrs["name"]: a.astype(n.attrs["dtype"].np) for n, a in zip(graph.input_nodes, args)}
        rng = None if self.rng is None else self.rng.fold_in(iteration)
        return trace_graph(graph, values, replace(self, rng=rng, node=None))


def trace_graph(graph: Graph, bound: Mapping[str, Any], ctx: LowerContext) -> list[Any]:
    """The outputs of ``graph`` as traced JAX values; ``bound`` holds its inputs and params by name."""
    values: dict[tuple[int, int], Any] = {}
    for node in graph.nodes:
        if node.kind in ("input", "param"):
            values[(node.id, 0)] = bound[node.attrs["name"]]
            continue
        outs = _lower_node(node, [values[r] for r in node.inputs], ctx)
        for i, out in enumerate(outs):
            values[(node.id, i)] = out
    return [values[r] for r in graph.outputs]


def _lower_node(node: Node, args: list[Any], ctx: LowerContext) -> list[Any]:
    import jax.numpy as jnp
    extra = (ctx.extra or {}).get(node.kind)
    rule = Lowering(node.kind, extra) if extra is not None else LOWERINGS[node.kind]
    if not rule.low_float:
        args = [a.astype(np.float32) if is_low_float(a.dtype) else a for a in args]
    if rule.context:
        res = rule.fn(replace(ctx, node=node), *args, **node.attrs)
    else:
        res = rule.fn(*args, **node.attrs)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(res) != len(node.outputs):
        raise GraphError(f"tpu lowering of {node.label} gave {len(res)} outputs, expected {len(node.outputs)}")
    outs = []
    for i, (r, shape) in enumerate(zip(res, node.outputs)):
        r = jnp.asarray(r)
        if shape.dtype.is_low_float and jnp.issubdtype(r.dtype, jnp.floating):
            r = r.astype(shape.dtype.np)
        if tuple(r.shape) != shape.dims or np.dtype(r.dtype) != shape.dtype.np:
            raise GraphError(f"tpu lowering of {node.label} output {i} gave {list(r.shape)} {r.dtype}, "
                             f"expected {shape}")
        outs.append(r)
    return outs


def is_low_float(dtype) -> bool:
    """Whether ``dtype`` is f16 or bf16 (computed in f32 and rounded once per node)."""
    return np.dtype(dtype) in LOW_FLOATS


def draws_random(graph: Graph) -> bool:
    """Whether ``graph`` (or any of its subgraphs) has an rng node."""
    from .random import KINDS
    return any(kind in KINDS for kind in graph.kinds())


from . import control, conv, elementwise, fft, linalg, movement, nn, quant, random, reduce, sources  # noqa: E402,F401

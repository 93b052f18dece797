"""Lowering RLX graphs to MLX: one rule per op kind, traced into one ``mx.compile`` function.

A rule has the reference kernel's signature on MLX arrays, ``fn(*inputs, **attrs)``, or
``fn(ctx, *inputs, **attrs)`` when registered with ``context=True`` (random numbers,
subgraphs, the device). :func:`trace_graph` calls the rules node by node; the executor
(``rlx_mlx.executable``) runs that trace under ``mx.compile``, so MLX sees the whole
graph at once and fuses its elementwise chains.

Numbers follow the reference interpreter exactly as the conformance suite checks them:

* 16-bit floats are computed in f32 and rounded once per node: rules receive f16/bf16
  inputs as f32 and their float results are rounded to the node's dtype. Rules
  registered with ``low_float=True`` receive the 16-bit inputs unchanged and must give
  the same numbers themselves (movement ops; matmul, which contracts 16-bit operands
  with f32 accumulation where MLX does).
* Every rule must return the node's output dims and dtype; a rule that does not is a
  bug and raises at trace time, naming the node.

What a rule cannot run exactly is declared with it: ``exclude`` (dtypes it never
claims) and ``check`` (``check(node, device) -> reason | None`` for attribute values),
so that the backend rejects such nodes at compile time. MLX has no complex128, and
float64 only on its CPU device: the backend drops those everywhere.

Plugins add lowerings for custom op kinds (or replace built-in ones) through the
``rlx_op_kernels`` hook for backend ``"mlx"``: ``{kind: fn(*inputs, **attrs)}`` on MLX
arrays, under the same 16-bit rule.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlx_core.errors import GraphError
from rlx_core.ir import DType, Graph, Node

__all__ = ["Lowering", "LOWERINGS", "lowering", "LowerContext", "trace_graph", "trace_nodes", "mx_dtype", "np_dtype",
           "is_low_float", "LOW_FLOATS", "from_numpy", "to_numpy", "empty_array", "CONTROL_KINDS", "RNG_KINDS"]

CONTROL_KINDS = frozenset({"if", "while", "scan"})
RNG_KINDS = frozenset({"rng_uniform", "rng_normal"})


@dataclass(frozen=True)
class Lowering:
    kind: str
    fn: Callable
    context: bool = False
    low_float: bool = False  # receives f16/bf16 inputs as they are (see the module docstring)
    exclude: frozenset = frozenset()  # dtypes (the node's key dtype) this rule does not claim
    check: Callable[[Node, str], "str | None"] | None = None


LOWERINGS: dict[str, Lowering] = {}


def lowering(*kinds: str, context: bool = False, low_float: bool = False, exclude=(), check=None):
    """Register ``fn`` as the lowering of each of ``kinds`` (decorator)."""
    def deco(fn):
        for kind in kinds:
            if kind in LOWERINGS:
                raise GraphError(f"an mlx lowering for '{kind}' is already registered")
            LOWERINGS[kind] = Lowering(kind, fn, context, low_float, frozenset(exclude), check)
        return fn
    return deco



def _dtype_table():
    import mlx.core as mx
    return {DType.F32: mx.float32, DType.F64: mx.float64, DType.F16: mx.float16, DType.BF16: mx.bfloat16,
            DType.I8: mx.int8, DType.I16: mx.int16, DType.I32: mx.int32, DType.I64: mx.int64,
            DType.U8: mx.uint8, DType.U32: mx.uint32, DType.BOOL: mx.bool_, DType.C64: mx.complex64}


_TABLE: dict | None = None
_BACK: dict | None = None


def mx_dtype(dtype) -> Any:
    """The MLX dtype of ``dtype`` (a DType, numpy dtype or name); GraphError where MLX has none."""
    global _TABLE, _BACK
    if _TABLE is None:
        _TABLE = _dtype_table()
        _BACK = {v: k for k, v in _TABLE.items()}
    dt = dtype if isinstance(dtype, DType) else DType.of(dtype)
    try:
        return _TABLE[dt]
    except KeyError:
        raise GraphError(f"MLX has no {dt} type") from None


def _describe_dtype(mx_dt) -> str:
    try:
        return DType.of(np_dtype(mx_dt)).value
    except Exception:
        return str(mx_dt).rsplit(".", 1)[-1]


def np_dtype(mx_dt) -> np.dtype:
    """The numpy dtype of an MLX dtype."""
    if _BACK is None:
        mx_dtype(DType.F32)
    return _BACK[mx_dt].np


_BF16_DIRECT: bool | None = None  # whether this MLX reads ml_dtypes' bfloat16 arrays (0.32 does, 0.29 not)


def from_numpy(a: np.ndarray) -> Any:
    """A host array (bf16 included) as an MLX array of the same dtype (one copy)."""
    global _BF16_DIRECT
    import mlx.core as mx
    a = np.asarray(a)
    dt = DType.of(a.dtype)
    if dt is DType.BF16 and _BF16_DIRECT is not True:
        if _BF16_DIRECT is None:
            try:
                out = mx.array(a, dtype=mx.bfloat16)
                _BF16_DIRECT = True
                return out
            except (TypeError, ValueError):
                _BF16_DIRECT = False
        return mx.array(np.ascontiguousarray(a).view(np.uint16)).view(mx.bfloat16)
    return mx.array(a, dtype=mx_dtype(dt))


def to_numpy(x) -> np.ndarray:
    """An MLX array as numpy without a copy where the buffer protocol allows (bf16 through
    a u16 view: PEP 3118 has no bfloat16)."""
    import mlx.core as mx
    if x.size == 0:  # no buffer to view (MLX's CUDA build has a null one)
        return np.zeros(tuple(x.shape), np_dtype(x.dtype))
    if x.dtype == mx.bfloat16:
        return np.asarray(x.view(mx.uint16)).view(DType.BF16.np)
    return np.asarray(x)


LOW_FLOATS = frozenset({DType.F16, DType.BF16})


def is_low_float(mx_dt) -> bool:
    import mlx.core as mx
    return mx_dt in (mx.float16, mx.bfloat16)


@dataclass(frozen=True)
class LowerContext:
    """What context rules see while a graph is traced.

    ``device`` is ``"cpu"`` or ``"gpu"`` (MLX's device the program runs on); ``rng`` the
    random state of the (sub)graph being traced (``random.RngState``), None when it draws
    nothing; ``extra`` plugin lowerings by kind; ``node`` the node being lowered;
    ``subgraphs`` runs a control-flow subgraph (the executor's, host-driven).
    """

    device: str
    rng: Any = None
    extra: Mapping[str, Callable] | None = None
    node: Node | None = None
    subgraphs: Any = None

    def run_subgraph(self, graph: Graph, args: Sequence[Any], iteration: int) -> list[Any]:
        """Run ``graph`` on ``args`` (by position, cast to its declared input dtypes) under
        the random state folded with ``iteration``, as the control ops define."""
        return self.subgraphs(graph, args, iteration, self.rng)


def trace_graph(graph: Graph, bound: Mapping[str, Any], ctx: LowerContext, outputs=None) -> list[Any]:
    """The values of ``outputs`` (default: the graph's outputs) as MLX arrays; ``bound``
    holds the graph's inputs and params by name (those missing are read by no op)."""
    values: dict[tuple[int, int], Any] = {}
    for node in graph.nodes:
        if node.kind in ("input", "param"):
            values[(node.id, 0)] = bound.get(node.attrs["name"])
    trace_nodes([n for n in graph.nodes if n.kind not in ("input", "param")], values, ctx)
    return [values[tuple(r)] for r in (graph.outputs if outputs is None else outputs)]


def trace_nodes(nodes: Sequence[Node], values: dict, ctx: LowerContext) -> None:
    """Lower ``nodes`` in order, reading their inputs from ``values`` (``(node id, output)``
    -> array) and adding their outputs to it."""
    for node in nodes:
        outs = _lower_node(node, [values[tuple(r)] for r in node.inputs], ctx)
        for i, out in enumerate(outs):
            values[(node.id, i)] = out


def empty_array(dims, dtype) -> Any:
    """An MLX array with no elements, of DType ``dtype``: a constant, so that no MLX kernel
    ever runs on it (MLX's CUDA fused kernels divide by the element count)."""
    return from_numpy(np.zeros(tuple(dims), dtype.np))


def _lower_node(node: Node, args: list[Any], ctx: LowerContext) -> list[Any]:
    import mlx.core as mx
    if node.outputs and all(0 in shape.dims for shape in node.outputs) and node.kind not in CONTROL_KINDS:
        # Nothing to compute: the (empty) results directly, whatever the inputs.
        return [empty_array(shape.dims, shape.dtype) for shape in node.outputs]
    extra = (ctx.extra or {}).get(node.kind)
    rule = Lowering(node.kind, extra) if extra is not None else LOWERINGS[node.kind]
    if not rule.low_float:
        args = [a.astype(mx.float32) if is_low_float(a.dtype) else a for a in args]
    if rule.context:
        res = rule.fn(replace(ctx, node=node), *args, **node.attrs)
    else:
        res = rule.fn(*args, **node.attrs)
    res = list(res) if isinstance(res, (tuple, list)) else [res]
    if len(res) != len(node.outputs):
        raise GraphError(f"mlx lowering of {node.label} gave {len(res)} outputs, expected {len(node.outputs)}")
    outs = []
    for i, (r, shape) in enumerate(zip(res, node.outputs)):
        want = mx_dtype(shape.dtype)
        if not isinstance(r, mx.array):
            r = mx.array(r, dtype=want)
        if r.dtype != want and shape.dtype.is_low_float and mx.issubdtype(r.dtype, mx.floating):
            r = r.astype(want)
        if tuple(r.shape) != shape.dims or r.dtype != want:
            got = _describe_dtype(r.dtype)
            raise GraphError(f"mlx lowering of {node.label} output {i} gave {list(r.shape)} {got}, "
                             f"expected {list(shape.dims)} {shape.dtype}")
        outs.append(r)
    return outs


from . import control, conv, elementwise, fft, linalg, movement, nn, quant, random, reduce, sources  # noqa: E402,F401

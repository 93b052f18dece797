"""Import an ONNX model as an RLX Graph (``pip install rlx-core[onnx]``).

    model = load_onnx("model.onnx")             # or a ModelProto
    compiled = Session("cpu").compile(model.graph)
    compiled.set_params(model.params)
    outputs = compiled.run({"input": x})

Graph inputs become RLX inputs (static shapes; pass ``input_shapes`` for symbolic dims).
Float initializers become params (their values in ``model.params``) or, with
``initializers="constants"``, constants. Integer and bool initializers are constants.

Shapes are static, so everything computable at import time is computed then: a node
whose inputs are all known constants (``Shape`` of a value, shape arithmetic on it,
integer initializers ...) is evaluated with the reference interpreter and becomes a
constant. This folds away the dynamic-shape subgraphs exporters emit, and lets
converters insist that inputs such as ``Reshape``'s shape be constants.

Converters live in ``rlx_core.frontends.onnx_ops``, one small function per ONNX op type.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import FrontendError, GraphError
from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.node import Value
from ..reference import evaluate

__all__ = ["load_onnx", "OnnxModel", "onnx_op", "ConvertContext", "CONVERTERS", "onnx_dtype"]

CONVERTERS: dict[str, Callable[["ConvertContext"], Any]] = {}
# Ops that must not be evaluated at import time even with constant inputs.
NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                "Bernoulli"}
MIN_OPSET = 13


def onnx_op(*op_types: str):
    """Register a converter ``fn(ctx) -> Value | sequence of Values`` for ONNX op types."""
    def deco(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return deco


@dataclass
class OnnxModel:
    """The imported graph and the initializer values its params need."""

    graph: Graph
    params: dict[str, np.ndarray]
    opset: int
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)


def onnx_dtype(elem_type: int) -> DType:
    """TensorProto element type -> DType (FrontendError for types RLX has no dtype for)."""
    from onnx import TensorProto
    table = {TensorProto.FLOAT: DType.F32, TensorProto.FLOAT16: DType.F16, TensorProto.BFLOAT16: DType.BF16,
             TensorProto.DOUBLE: DType.F64, TensorProto.INT8: DType.I8, TensorProto.INT16: DType.I16,
             TensorProto.INT32: DType.I32, TensorProto.INT64: DType.I64, TensorProto.UINT8: DType.U8,
             TensorProto.UINT32: DType.U32, TensorProto.BOOL: DType.BOOL, TensorProto.COMPLEX64: DType.C64,
             TensorProto.COMPLEX128: DType.C128}
    if elem_type not in table:
        raise FrontendError(f"ONNX element type {TensorProto.DataType.Name(elem_type)} has no RLX dtype "
                            f"(supported: {', '.join(d.value for d in table.values())})")
    return table[elem_type]


class ConvertContext:
    """What a converter sees: the node, its attributes, its inputs (as graph values or
    import-time constants) and the graph to build into."""

    def __init__(self, importer: "_Importer", graph: Graph, node, env: Mapping[str, Any]):
        from onnx import helper
        self.importer = importer
        self.g = graph
        self.node = node
        self.opset = importer.opset
        self.attrs = {a.name: _attr_value(helper.get_attribute_value(a), a) for a in node.attribute}
        self._env = env

    # --- inputs -------------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.node.input)

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def input(self, i: int) -> Value | None:
        """Input ``i`` as a graph value (constants are materialized); None when absent."""
        if not self.has(i):
            return None
        v = self._env[self.node.input[i]]
        return v if isinstance(v, Value) else self.g.constant(v)

    def inputs(self) -> list[Value | None]:
        return [self.input(i) for i in range(self.num_inputs)]

    def const(self, i: int, default=None) -> np.ndarray | None:
        """Input ``i``'s value, which must be known at import time."""
        if not self.has(i):
            return default
        v = self._env[self.node.input[i]]
        if isinstance(v, Value):
            raise self.error(f"input {i} ('{self.node.input[i]}') must be a constant known at import "
                             f"time (RLX graphs are statically shaped)")
        return v

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    def subgraph(self, name: str, operand_types) -> tuple[Graph, list[str]]:
        """Import the graph attribute ``name``; returns it and the outer names it reads
        (which the caller passes as extra operands, in that order)."""
        return self.importer.import_subgraph(self.attrs[name], operand_types, self._env)

    def error(self, message: str) -> FrontendError:
        n = self.node
        return FrontendError(f"ONNX node '{n.name or n.output[0]}' ({n.op_type}, opset {self.opset}): {message}")


class _Importer:
    def __init__(self, model, initializers: str, input_shapes: Mapping[str, Sequence[int]]):
        if initializers not in ("params", "constants"):
            raise FrontendError(f"initializers must be 'params' or 'constants', got {initializers!r}")
        self.model = model
        self.initializers = initializers
        self.input_shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        if self.opset < MIN_OPSET:
            raise FrontendError(f"model uses opset {self.opset}; RLX imports opsets {MIN_OPSET} to "
                                f"{_max_opset()} (upgrade it with onnx.version_converter)")
        self.params: dict[str, np.ndarray] = {}

    def run(self, name: str | None) -> OnnxModel:
        og = self.model.graph
        g = Graph(name or og.name or "onnx")
        env: dict[str, Any] = {}
        self._bind_initializers(g, og.initializer, env)
        for vi in og.input:
            if vi.name in env:
                continue  # an initializer listed as an input (older exporters)
            dims, dtype = self._value_type(vi)
            env[vi.name] = g.input(_sanitize(vi.name), dims, dtype)
        self._convert_nodes(g, og.node, env)
        outs = [self._output_value(g, env, o.name) for o in og.output]
        g.set_outputs(outs, names=[o.name for o in og.output])
        return OnnxModel(g, self.params, self.opset, [i.name for i in og.input if i.name not in self.params
                                                      and not _is_initializer(og, i.name)],
                         [o.name for o in og.output])

    def _bind_initializers(self, g: Graph, initializers, env) -> None:
        from onnx import numpy_helper
        for init in initializers:
            arr = numpy_helper.to_array(init)
            dt = onnx_dtype(init.data_type)
            arr = arr.astype(dt.np, copy=False)
            if self.initializers == "constants" or not (dt.is_float or dt.is_complex):
                env[init.name] = arr
            else:
                env[init.name] = g.param(_sanitize(init.name), arr.shape, dt)
                self.params[_sanitize(init.name)] = arr

    def _value_type(self, vi) -> tuple[tuple[int, ...], DType]:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"graph input '{vi.name}' is not a tensor (sequences/maps are not supported)")
        dtype = onnx_dtype(t.elem_type)
        if vi.name in self.input_shapes:
            return self.input_shapes[vi.name], dtype
        dims = []
        for d in t.shape.dim:
            if not d.HasField("dim_value"):
                raise FrontendError(f"graph input '{vi.name}' has a symbolic dimension "
                                    f"'{d.dim_param or '?'}'; RLX graphs are statically shaped: pass "
                                    f"input_shapes={{'{vi.name}': (...)}} to load_onnx")
            dims.append(d.dim_value)
        return tuple(dims), dtype

    def _convert_nodes(self, g: Graph, nodes, env) -> None:
        for node in nodes:
            if node.domain not in ("", "ai.onnx"):
                raise FrontendError(f"ONNX node '{node.name}' uses domain '{node.domain}' "
                                    f"({node.op_type}); only the default domain is supported")
            conv = CONVERTERS.get(node.op_type)
            if conv is None:
                raise FrontendError(f"ONNX node '{node.name or node.output[0]}': op type {node.op_type} "
                                    f"(opset {self.opset}) is not supported by the RLX importer")
            known = all(i == "" or not isinstance(env[i], Value) for i in node.input)
            if known and node.op_type not in NOT_FOLDABLE and node.input:
                outs = self._fold(node, env, conv)
            else:
                ctx = ConvertContext(self, g, node, env)
                outs = self._call(ctx, conv)
            for name, v in zip(node.output, outs):
                if name:
                    env[name] = v

    def _call(self, ctx: ConvertContext, conv) -> list:
        try:
            res = conv(ctx)
        except (GraphError, ValueError, TypeError) as e:
            raise ctx.error(f"{type(e).__name__}: {e}") from None
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        if len(res) < len([o for o in ctx.node.output if o]):
            raise ctx.error(f"converter produced {len(res)} outputs, the node has {len(ctx.node.output)}")
        return res

    def _fold(self, node, env, conv) -> list[np.ndarray]:
        """Evaluate a node with constant inputs now, with the reference interpreter."""
        scratch = Graph("fold")
        ctx = ConvertContext(self, scratch, node, env)
        res = self._call(ctx, conv)
        vals = [r for r in res if isinstance(r, Value)]
        if vals:
            scratch.set_outputs(vals)
            computed = iter(evaluate(scratch))
            res = [next(computed) if isinstance(r, Value) else r for r in res]
        return [np.asarray(r) for r in res]

    def import_subgraph(self, proto, operand_types, outer_env) -> tuple[Graph, list[str]]:
        """A body graph whose inputs are the given operands followed by every outer value
        it reads (ONNX bodies capture outer names implicitly; RLX bodies do not)."""
        g = Graph(proto.name or "body")
        env: dict[str, Any] = {}
        for vi, (dims, dtype) in zip(proto.input, operand_types):
            env[vi.name] = g.input(_sanitize(vi.name), dims, dtype)
        self._bind_initializers(g, proto.initializer, env)
        captured = [n for n in _free_names(proto) if n not in env and isinstance(outer_env.get(n), Value)]
        for name in captured:
            v = outer_env[name]
            env[name] = g.input(_sanitize(name), v.dims, v.dtype)
        for name in _free_names(proto):
            if name not in env and name in outer_env:
                env[name] = outer_env[name]  # an import-time constant: no operand needed
        self._convert_nodes(g, proto.node, env)
        g.set_outputs([self._output_value(g, env, o.name) for o in proto.output])
        return g, captured

    def _output_value(self, g: Graph, env, name: str) -> Value:
        if name not in env:
            raise FrontendError(f"graph output '{name}' is not produced by any node")
        v = env[name]
        return v if isinstance(v, Value) else g.constant(v)


def load_onnx(model, *, initializers: str = "params", input_shapes: Mapping[str, Sequence[int]] | None = None,
              name: str | None = None) -> OnnxModel:
    """Import ``model`` (a path or an ``onnx.ModelProto``); external data next to a path
    is loaded. See the module docstring."""
    import onnx
    from . import onnx_ops  # noqa: F401  (registers the converters)
    if isinstance(model, (str, os.PathLike)):
        try:
            model = onnx.load(os.fspath(model))  # also loads external data from the model's folder
        except Exception as e:
            raise FrontendError(f"cannot read ONNX model {os.fspath(model)!r}: {e}") from None
    return _Importer(model, initializers, input_shapes).run(name)


def _free_names(proto) -> list[str]:
    """Names a (sub)graph's nodes read that it does not define itself, in first-use order."""
    defined = {i.name for i in proto.input} | {i.name for i in proto.initializer}
    free: list[str] = []
    for node in proto.node:
        for name in node.input:
            if name and name not in defined and name not in free:
                free.append(name)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                free.extend(n for n in _free_names(sub) if n not in defined and n not in free)
        defined.update(node.output)
    return free


def _is_initializer(graph_proto, name: str) -> bool:
    return any(i.name == name for i in graph_proto.initializer)


def _attr_value(value, attr):
    from onnx import AttributeProto
    if attr.type == AttributeProto.TENSOR:
        from onnx import numpy_helper
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value


def _sanitize(name: str) -> str:
    return re.sub(r"\s+", "_", name) or "_"


def _max_opset() -> int:
    import onnx
    return onnx.defs.onnx_opset_version()

"""Import an ONNX model as an RLX Graph (``pip install rlx-core[onnx]``).

    model = load_onnx("model.onnx")             # or a ModelProto
    compiled = Session("cpu").compile(model.graph)
    compiled.set_params(model.params)
    outputs = compiled.run({"input": x})

Graph inputs become RLX inputs (static shapes; pass ``input_shapes`` for symbolic dims).
Float initializers become params (their values in ``model.params``) or, with
``initializers="constants"``, constants. Integer and bool initializers are constants.
Opsets 13 up to the newest the installed ``onnx`` knows are imported; older models
can be upgraded with ``onnx.version_converter`` first.

Shapes are static, so everything computable at import time is computed then: a node
whose inputs are all known constants (``Shape`` of a value, shape arithmetic on it,
integer initializers ...) is evaluated with the reference interpreter and becomes a
constant -- unless a value it computes would exceed ``FOLD_LIMIT_BYTES`` (or it is a
``Loop`` of more than ``FOLD_MAX_TRIPS`` iterations): then it stays a runtime op, so a
model of a few hundred bytes cannot make the import allocate terabytes (the compiled
graph's memory plan judges it instead). This folds away the dynamic-shape subgraphs exporters emit, and lets
converters insist that inputs such as ``Reshape``'s shape be constants. When such an
input is a graph input instead, :func:`load_onnx_for` specializes the model on its
value (``constants`` does the same by hand).

Anything the importer cannot map -- an op type without a converter, an attribute
value beyond what the IR expresses, a dtype RLX lacks -- raises ``FrontendError``
naming the node, its op type and the opset (``ModelDataError``, also a ``ValueError``,
where the model's data contradict themselves: see ``rlx_core.frontends.onnx_data``,
which also reads external data); it never imports something that would
compute different numbers. Converters live in ``rlx_core.frontends.onnx_ops``, one
small function per ONNX op type.
"""
from __future__ import annotations

import functools
import math
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import FrontendError, GraphError
from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.node import Value
from ..reference import evaluate
from .onnx_data import ExternalData, ModelDataError, initializer_array

__all__ = ["load_onnx", "load_onnx_for", "OnnxModel", "onnx_op", "ConvertContext", "SubgraphImport", "CONVERTERS",
           "onnx_dtype", "ONNX_DTYPES", "ConstantRequiredError", "ModelDataError", "FrontendArgumentError",
           "computed_in_f32", "MIN_OPSET", "max_opset", "FOLD_LIMIT_BYTES", "FOLD_MAX_TRIPS", "foldable"]

CONVERTERS: dict[str, Callable[["ConvertContext"], Any]] = {}
# Ops whose results must not be computed at import time even from constant inputs.
NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli"}
MIN_OPSET = 13
# Import-time folding bounds: a value of more bytes, or a Loop of more iterations, stays a runtime op.
FOLD_LIMIT_BYTES = 64 << 20
FOLD_MAX_TRIPS = 1 << 16
# TensorProto element type numbers (fixed by onnx.proto) -> RLX dtypes
ONNX_DTYPES = {1: DType.F32, 10: DType.F16, 16: DType.BF16, 11: DType.F64, 3: DType.I8, 5: DType.I16,
               6: DType.I32, 7: DType.I64, 2: DType.U8, 12: DType.U32, 9: DType.BOOL, 14: DType.C64,
               15: DType.C128}


class ConstantRequiredError(FrontendError):
    """An input that must be known at import time (a shape, an axis list, ``k`` ...) is
    a runtime value. ``value_name`` is the ONNX name of that value."""

    def __init__(self, message: str, value_name: str):
        super().__init__(message)
        self.value_name = value_name


class FrontendArgumentError(FrontendError, TypeError):
    """``load_onnx`` / ``load_onnx_for`` got an argument of the wrong type (named in the message)."""


def foldable(dims, dtype: DType) -> bool:
    """Whether a tensor of ``dims`` and ``dtype`` is small enough to compute at import
    time (``FOLD_LIMIT_BYTES``); converters that build values with numpy check this and
    emit runtime ops instead when it says no."""
    return math.prod(dims) * dtype.itemsize <= FOLD_LIMIT_BYTES


def onnx_op(*op_types: str):
    """Register a converter ``fn(ctx) -> Value | array | sequence of them`` for ONNX op types."""
    def deco(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return deco


@dataclass
class OnnxModel:
    """The imported graph, the initializer values its params need, and the ONNX names of
    its runtime inputs and outputs (inputs frozen by ``constants`` are not among them)."""

    graph: Graph
    params: dict[str, np.ndarray]
    opset: int
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)


def onnx_dtype(elem_type: int) -> DType:
    """TensorProto element type -> DType (FrontendError for types RLX has no dtype for)."""
    from onnx import TensorProto
    if elem_type not in ONNX_DTYPES:
        raise FrontendError(f"ONNX element type {TensorProto.DataType.Name(elem_type)} has no RLX dtype "
                            f"(supported: {', '.join(d.value for d in ONNX_DTYPES.values())})")
    return ONNX_DTYPES[elem_type]


def node_label(node, opset: int) -> str:
    """How errors name a node: ``ONNX node 'proj' (MatMul, opset 17)``."""
    return f"ONNX node '{node.name or node.output[0]}' ({node.op_type}, opset {opset})"


class ConvertContext:
    """What a converter sees: the node, its attributes, its inputs (as graph values or
    import-time constants) and the graph to build into."""

    def __init__(self, importer: "_Importer", graph: Graph, node, env: Mapping[str, Any]):
        from onnx import helper
        self.importer = importer
        self.g = graph
        self.node = node
        self.op_type = node.op_type
        self.opset = importer.opset
        self.attrs = {a.name: _attr_value(helper.get_attribute_value(a), a) for a in node.attribute}
        self._env = env
        self.widen_low_floats = False  # set by @computed_in_f32

    @property
    def version(self) -> int:
        """The version of this op's definition in the model's opset (e.g. 13 for a
        ReduceSum under opset 17): converters branch on it where ONNX changed an op."""
        return _since_version(self.op_type, self.opset)

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
        name = self.node.input[i]
        v = self._env[name]
        v = v if isinstance(v, Value) else self.importer.materialize(self.g, name, v)
        return self.g.cast(v, DType.F32) if self.widen_low_floats and v.dtype.is_low_float else v

    def inputs(self) -> list[Value | None]:
        return [self.input(i) for i in range(self.num_inputs)]

    def is_const(self, i: int) -> bool:
        """Whether input ``i`` is present and known at import time."""
        return self.has(i) and not isinstance(self._env[self.node.input[i]], Value)

    def const(self, i: int, default=None) -> np.ndarray | None:
        """Input ``i``'s value, which must be known at import time (``default`` when absent).
        A float initializer imported as a param counts as known here (its value is used)."""
        if not self.has(i):
            return default
        name = self.node.input[i]
        v = self._env[name]
        if isinstance(v, Value):
            if name in self.importer.initializer_values:
                return self.importer.initializer_values[name]
            raise ConstantRequiredError(f"{node_label(self.node, self.opset)}: input {i} ('{name}') must be a "
                                        f"constant known at import time (RLX graphs are statically shaped)", name)
        return v

    def const_ints(self, i: int, default=None) -> tuple[int, ...] | None:
        """Input ``i`` (known at import time) as a tuple of Python ints."""
        v = self.const(i)
        return default if v is None else tuple(int(x) for x in np.asarray(v).reshape(-1))

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)

    # --- outputs ------------------------------------------------------------------------
    def wants(self, i: int) -> bool:
        """Whether output ``i`` is used (present and named)."""
        return i < len(self.node.output) and self.node.output[i] != ""

    # --- subgraphs ----------------------------------------------------------------------
    def begin_subgraph(self, name: str) -> "SubgraphImport":
        """Start importing the graph attribute ``name`` as an RLX subgraph."""
        return SubgraphImport(self.importer, self.attrs[name], self._env)

    def captures(self, *names: str) -> list[str]:
        """The outer runtime values the graph attributes ``names`` read, in first-use order
        (RLX subgraphs see only their inputs, so these become extra operands)."""
        out: list[str] = []
        for n in names:
            out += [c for c in _free_names(self.attrs[n]) if c not in out and isinstance(self._env.get(c), Value)]
        return out

    def outer(self, name: str) -> Value:
        """The outer runtime value ``name`` (one of ``captures``)."""
        return self._env[name]

    def inline(self, name: str) -> list:
        """Import the (input-less) graph attribute ``name`` into this graph, reading outer
        values directly; returns its outputs (an If whose condition is known)."""
        proto = self.attrs[name]
        env = dict(self._env)
        self.importer.convert_graph_body(self.g, proto, env)
        return [env[o.name] for o in proto.output]

    # --- errors -------------------------------------------------------------------------
    def error(self, message: str, cls: type[FrontendError] = FrontendError) -> FrontendError:
        """``cls`` (``FrontendError``, or ``ModelDataError`` for data that contradict the
        op's definition) naming this node."""
        return cls(f"{node_label(self.node, self.opset)}: {message}")

    def unsupported(self, what: str) -> FrontendError:
        """The error for a case beyond what the IR expresses: ``what`` says which."""
        return self.error(f"not supported by the RLX importer: {what}")


def computed_in_f32(converter):
    """For converters that compose several IR ops: f16/bf16 inputs are widened to f32
    and the results rounded back once, as the reference computes a single op (and as
    ONNX's reference computes these functions), instead of rounding after every step."""
    @functools.wraps(converter)
    def wrapper(ctx: ConvertContext):
        first = ctx.input(0)
        if first is None or not first.dtype.is_low_float:
            return converter(ctx)
        ctx.widen_low_floats = True
        try:
            res = converter(ctx)
        finally:
            ctx.widen_low_floats = False
        several = isinstance(res, (list, tuple))
        res = [ctx.g.cast(r, first.dtype) if isinstance(r, Value) and r.dtype is DType.F32 else r
               for r in (res if several else [res])]
        return res if several else res[0]
    return wrapper


class _Importer:
    def __init__(self, model, initializers: str, input_shapes: Mapping[str, Sequence[int]],
                 constants: Mapping[str, Any], base_dir: str | None):
        if initializers not in ("params", "constants"):
            raise FrontendError(f"initializers must be 'params' or 'constants', got {initializers!r}")
        self.model = model
        self.external = ExternalData(base_dir)
        self.initializers = initializers
        self.input_shapes = {k: tuple(v) for k, v in (input_shapes or {}).items()}
        self.constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if self.opset is None or not MIN_OPSET <= self.opset <= max_opset():
            raise FrontendError(f"model uses opset {self.opset}; RLX imports opsets {MIN_OPSET} to "
                                f"{max_opset()} (upgrade it with onnx.version_converter)")
        self.params: dict[str, np.ndarray] = {}
        self.initializer_values: dict[str, np.ndarray] = {}  # ONNX name -> value, for params
        self._materialized: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def run(self, name: str | None) -> OnnxModel:
        og = self.model.graph
        unknown = set(self.constants) - {i.name for i in og.input}
        if unknown:
            raise FrontendError(f"constants given for {sorted(unknown)}, which are not graph inputs "
                                f"(inputs: {[i.name for i in og.input]})")
        g = Graph(name or og.name or "onnx")
        env: dict[str, Any] = {}
        self._bind_initializers(g, og.initializer, env, as_params=self.initializers == "params")
        runtime_inputs = []
        for vi in og.input:
            if vi.name in env:
                continue  # an initializer listed as an input (older exporters)
            dims, dtype = self._value_type(vi)
            if vi.name in self.constants:
                env[vi.name] = self._frozen_input(vi.name, dims, dtype)
                continue
            env[vi.name] = g.input(vi.name, dims, dtype)
            runtime_inputs.append(vi.name)
        self._convert_nodes(g, og.node, env)
        outs = [self._output_value(g, env, o.name) for o in og.output]
        g.set_outputs(outs, names=[o.name for o in og.output])
        return OnnxModel(g, self.params, self.opset, runtime_inputs, [o.name for o in og.output])

    def _bind_initializers(self, g: Graph, initializers, env, as_params: bool) -> None:
        for init in initializers:
            dt = onnx_dtype(init.data_type)
            arr = initializer_array(init, self.external).astype(dt.np, copy=False)
            if as_params and (dt.is_float or dt.is_complex):
                env[init.name] = g.param(init.name, arr.shape, dt)
                self.params[init.name] = arr
                self.initializer_values[init.name] = arr
            else:
                env[init.name] = arr

    def _frozen_input(self, name: str, dims, dtype: DType) -> np.ndarray:
        value = self.constants[name]
        if tuple(value.shape) != tuple(dims):
            raise FrontendError(f"constant for graph input '{name}' has dims {list(value.shape)}, "
                                f"the input is declared {list(dims)}")
        return value.astype(dtype.np, copy=False)

    def _value_type(self, vi) -> tuple[tuple[int, ...], DType]:
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"graph input '{vi.name}' is not a tensor (sequences, maps and optionals "
                                f"are not supported)")
        t = vi.type.tensor_type
        dtype = onnx_dtype(t.elem_type)
        if vi.name in self.input_shapes:
            return self.input_shapes[vi.name], dtype
        if vi.name in self.constants:
            return tuple(self.constants[vi.name].shape), dtype
        if not t.HasField("shape"):
            raise FrontendError(f"graph input '{vi.name}' has no shape; pass input_shapes={{'{vi.name}': (...)}}")
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
                raise FrontendError(f"{node_label(node, self.opset)} uses domain '{node.domain}'; only the "
                                    f"default domain (ai.onnx) is supported")
            conv = CONVERTERS.get(node.op_type)
            if conv is None:
                raise FrontendError(f"{node_label(node, self.opset)}: op type {node.op_type} is not supported "
                                    f"by the RLX importer")
            reads = [i for i in list(node.input) + _free_names_of_node(node) if i]
            missing = [i for i in reads if i not in env]
            if missing:
                raise FrontendError(f"{node_label(node, self.opset)} reads {missing}, which no earlier node, "
                                    f"input or initializer defines")
            known = all(not isinstance(env[i], Value) for i in reads)
            outs = None
            if known and node.op_type not in NOT_FOLDABLE and any(node.input):
                outs = self._fold(node, env, conv)
            if outs is None:
                with g.origin(node_label(node, self.opset)):
                    outs = self._call(ConvertContext(self, g, node, env), conv)
            for name, v in zip(node.output, outs):
                if name:
                    env[name] = v

    def _call(self, ctx: ConvertContext, conv) -> list:
        try:
            res = conv(ctx)
        except FrontendError:
            raise
        except (GraphError, ValueError, TypeError) as e:
            raise ctx.error(f"{type(e).__name__}: {e}") from None
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        wanted = max((i + 1 for i, o in enumerate(ctx.node.output) if o), default=0)
        if len(res) < wanted:
            raise ctx.unsupported(f"output {len(res)} ('{ctx.node.output[len(res)]}') of {ctx.op_type}")
        return res

    def _fold(self, node, env, conv) -> list[np.ndarray] | None:
        """Evaluate a node with constant inputs now, with the reference interpreter; None
        when that would exceed the folding bounds (it then stays a runtime op)."""
        if node.op_type == "Loop" and not _trips_foldable(node, env):
            return None
        scratch = Graph("fold")
        ctx = ConvertContext(self, scratch, node, env)
        res = self._call(ctx, conv)
        vals = [r for r in res if isinstance(r, Value)]
        if any(not foldable(s.dims, s.dtype) for n in scratch.nodes for s in n.outputs):
            return None
        if vals:
            scratch.set_outputs(vals)
            computed = iter(evaluate(scratch))
            res = [next(computed) if isinstance(r, Value) else r for r in res]
        return [np.asarray(r) for r in res]

    def materialize(self, g: Graph, name: str, value: np.ndarray) -> Value:
        """The constant node for the import-time value ``name`` in ``g`` (made once per graph)."""
        cache = self._materialized.setdefault(g, {})
        if name not in cache:
            cache[name] = g.constant(value)
        return cache[name]

    def convert_graph_body(self, g: Graph, proto, env) -> None:
        """Bind a (sub)graph's initializers (as constants) and convert its nodes into ``g``;
        every output must then be defined in ``env``."""
        self._bind_initializers(g, proto.initializer, env, as_params=False)
        self._convert_nodes(g, proto.node, env)
        for o in proto.output:
            if o.name not in env:
                raise FrontendError(f"subgraph '{proto.name}' output '{o.name}' is not produced by any node")

    def _output_value(self, g: Graph, env, name: str) -> Value:
        if name not in env:
            raise FrontendError(f"graph output '{name}' is not produced by any node")
        v = env[name]
        return v if isinstance(v, Value) else self.materialize(g, name, v)


class SubgraphImport:
    """An ONNX graph attribute becoming an RLX subgraph ``g``. The converter declares the
    subgraph's inputs in the order the IR op wants them (``input``, ``capture``), binds
    ONNX input names to values or constants (``input``, ``bind``), then ``convert``s the
    nodes and sets ``g``'s outputs. Outer import-time constants are visible inside."""

    def __init__(self, importer: _Importer, proto, outer_env):
        self.importer, self.proto, self._outer = importer, proto, outer_env
        self.g = Graph(proto.name or "body")
        self.env: dict[str, Any] = {}

    @property
    def input_names(self) -> list[str]:
        """The ONNX names of the subgraph's declared inputs."""
        return [i.name for i in self.proto.input]

    def input(self, name: str, dims, dtype) -> Value:
        """A subgraph input bound to the ONNX name ``name``."""
        self.env[name] = self.g.input(name, dims, dtype)
        return self.env[name]

    def bind(self, name: str, value) -> None:
        """Bind the ONNX name ``name`` to a value of ``g`` or an import-time constant."""
        self.env[name] = value

    def capture(self, names: Sequence[str]) -> list[Value]:
        """Subgraph inputs standing for the outer runtime values ``names``."""
        out = []
        for name in names:
            v = self._outer[name]
            self.env[name] = self.g.input(f"captured:{name}", v.dims, v.dtype)
            out.append(self.env[name])
        return out

    def convert(self) -> list:
        """Convert the nodes; the outputs (graph values, or constants) in order."""
        for name in _free_names(self.proto):
            if name not in self.env and name in self._outer:
                if isinstance(self._outer[name], Value):
                    raise FrontendError(f"subgraph '{self.proto.name}' reads outer value '{name}', which was not "
                                        f"captured")
                self.env[name] = self._outer[name]
        self.importer.convert_graph_body(self.g, self.proto, self.env)
        return [self.env[o.name] for o in self.proto.output]

    def finish(self, outputs: Sequence) -> Graph:
        """Set ``g``'s outputs (constants are materialized) and return it."""
        self.g.set_outputs([v if isinstance(v, Value) else self.g.constant(v) for v in outputs])
        return self.g


def _trips_foldable(node, env) -> bool:
    """Whether a Loop with constant inputs has a known trip count of at most
    ``FOLD_MAX_TRIPS`` (evaluating it at import time must end, and soon)."""
    if not node.input or not node.input[0]:
        return False
    trips = np.asarray(env[node.input[0]]).reshape(-1)
    return trips.size == 1 and int(trips[0]) <= FOLD_MAX_TRIPS


def require_onnx():
    """The ``onnx`` module, or FrontendError with the exact install command."""
    try:
        import onnx
    except ImportError:
        from ..runtime.registry import install_hint
        raise FrontendError(f"importing ONNX models needs the onnx package: {install_hint('onnx')}") from None
    return onnx


def load_onnx(model, *, initializers: str = "params", input_shapes: Mapping[str, Sequence[int]] | None = None,
              constants: Mapping[str, Any] | None = None, name: str | None = None,
              base_dir: str | os.PathLike | None = None) -> OnnxModel:
    """Import ``model`` (a path or an ``onnx.ModelProto``). External data are read from
    ``base_dir`` (default: the folder of the model's path), memory-mapped, and only from
    inside that folder (``rlx_core.frontends.onnx_data``). ``input_shapes`` fixes the
    dims of inputs (symbolic dims need it); ``constants`` freezes graph inputs to the
    given values (they become import-time constants, no longer inputs). See the module
    docstring."""
    model, base_dir = _read_model(model, base_dir)
    return _Importer(model, initializers, input_shapes, constants, base_dir).run(name)


def _read_model(model, base_dir) -> tuple[Any, str | None]:
    """``model`` as a ModelProto (read from its path without its external data, which
    the importer reads itself) and the folder its external data come from."""
    onnx = require_onnx()
    from . import onnx_ops  # noqa: F401  (registers the converters)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception as e:
            raise FrontendError(f"cannot read ONNX model {path!r}: {e}") from None
        base_dir = base_dir if base_dir is not None else os.path.dirname(os.path.abspath(path))
    elif not isinstance(model, onnx.ModelProto):
        raise FrontendArgumentError(f"model must be a path (str or os.PathLike) or an onnx.ModelProto, "
                                    f"got {type(model).__name__} {model!r:.60}")
    return model, None if base_dir is None else os.fspath(base_dir)


def load_onnx_for(model, feeds: Mapping[str, np.ndarray], **kwargs) -> OnnxModel:
    """Import ``model`` specialized to the input values ``feeds`` (ONNX input name ->
    array): input dims are taken from the arrays, and the inputs the importer needs at
    import time (a Reshape's target shape, TopK's k, a window size ...) are frozen to
    their values -- the input itself, or the integer inputs it is computed from (never
    float data: a value computed from those stays a runtime value, and the import
    fails as unsupported). Feed the returned model's ``input_names`` at run time.
    ``kwargs`` go to ``load_onnx``."""
    model, kwargs["base_dir"] = _read_model(model, kwargs.get("base_dir"))
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    frozen: dict[str, np.ndarray] = dict(kwargs.pop("constants", None) or {})
    shapes = {k: v.shape for k, v in feeds.items()} | dict(kwargs.pop("input_shapes", None) or {})
    while True:
        try:
            return load_onnx(model, input_shapes=shapes, constants=frozen, **kwargs)
        except ConstantRequiredError as e:
            sources = [e.value_name] if e.value_name in feeds else [
                n for n in _input_ancestors(model.graph, e.value_name)
                if n in feeds and feeds[n].dtype.kind in "biu"]
            sources = [n for n in sources if n not in frozen]
            if not sources:
                raise
            frozen.update({n: feeds[n] for n in sources})


def _input_ancestors(graph, name: str) -> list[str]:
    """The graph inputs whose values ``name`` depends on (through any node, subgraphs included)."""
    inputs = {i.name for i in graph.input}
    producer = {o: node for node in _all_nodes(graph) for o in node.output}
    found, todo, seen = [], [name], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in inputs:
            found.append(n)
        elif n in producer:
            todo += [i for i in producer[n].input if i] + _free_names_of_node(producer[n])
    return found


def _all_nodes(graph):
    """The nodes of a graph and of all its subgraphs (an inlined If's nodes define
    values of the outer graph)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_nodes(sub)


def _free_names_of_node(node) -> list[str]:
    """Outer names a node's subgraphs read."""
    return [n for attr in node.attribute
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs) for n in _free_names(sub)]


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


@functools.lru_cache(maxsize=None)
def _since_version(op_type: str, opset: int) -> int:
    onnx = require_onnx()
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        raise FrontendError(f"op type {op_type} does not exist in ONNX opset {opset}") from None


def max_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` defines."""
    onnx = require_onnx()
    return onnx.defs.onnx_opset_version()

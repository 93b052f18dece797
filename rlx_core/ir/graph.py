"""The Graph: an append-only list of nodes, built through shape-checking methods.

Every builder method (``g.matmul``, ``g.softmax`` ... see ``rlx_core.ir.ops``) ends in
:meth:`Graph.add_node`, which looks up the op kind's schema, checks arity and
attributes, runs the shape rule and, if the caller passed an explicit ``shape``,
verifies it (the seed's ``g.matmul(x, w, Shape(...))`` form). A node therefore never
holds a shape that its rule disagrees with, and errors name the node being added.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import ArgumentTypeError, DTypeError, GraphError, ShapeError
from .dtypes import DType
from .node import Node, Ref, Value
from .ops import BUILDER_MIXINS
from .schema import get_schema
from .shape import Shape

__all__ = ["Graph"]


class Graph(*BUILDER_MIXINS):
    """A statically shaped dataflow graph. ``Graph("name")``; see the module docstring."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.outputs: list[Ref] = []
        self._output_names: list[str | None] = []
        self._names: dict[str, int] = {}  # input/param name -> node id
        # node id -> where the node came from in the user's model (``ONNX node 'eq1'
        # (Equal, opset 17)``), for errors; not part of the graph's meaning or fingerprint.
        self.origins: dict[int, str] = {}
        self._origin: str | None = None

    @contextmanager
    def origin(self, text: str | None) -> Iterator[None]:
        """Nodes added inside ``with g.origin("ONNX node 'eq1' (Equal)")`` record it."""
        outer, self._origin = self._origin, text or self._origin
        try:
            yield
        finally:
            self._origin = outer

    def describe(self, node: Node) -> str:
        """``node.label``, plus its origin in the user's model when known."""
        origin = self.origins.get(node.id)
        return f"{node.label} ({origin})" if origin else node.label

    # --- building -------------------------------------------------------------------
    def add_node(self, kind: str, inputs: Sequence[Value | Ref] = (), attrs: dict[str, Any] | None = None,
                 *, shape: "Shape | Sequence[Shape] | None" = None, name: str | None = None):
        """Append a node of ``kind``; returns its Value (or a tuple for multi-output kinds)."""
        schema = get_schema(kind)
        label = f"%{len(self.nodes)} {kind}" + (f" '{name}'" if name else "")
        try:
            refs = tuple(self._ref(v) for v in inputs)
            bound = schema.bind_attrs(dict(attrs or {}))
            outs = schema.infer([self.shape_of(r) for r in refs], bound)
        except GraphError as e:
            raise type(e)(f"node {label}: {e}") from None
        if shape is not None:
            want = (shape,) if isinstance(shape, Shape) else tuple(shape)
            if want != outs:
                raise ShapeError(f"node {label}: given shape {list(want) if len(want) > 1 else want[0]} "
                                 f"but the {kind} rule gives {list(outs) if len(outs) > 1 else outs[0]}")
        node = Node(len(self.nodes), kind, refs, bound, outs, name)
        if kind in ("input", "param"):
            key = bound["name"]
            if key in self._names:
                raise GraphError(f"node {label}: the name '{key}' is already used by "
                                 f"{self.nodes[self._names[key]].label}")
            self._names[key] = node.id
        self.nodes.append(node)
        if self._origin:
            self.origins[node.id] = self._origin
        vals = tuple(Value(self, Ref(node.id, i)) for i in range(len(outs)))
        return vals[0] if len(vals) == 1 and not schema.meta.get("multi_output") else vals

    def op(self, kind: str, *inputs, shape=None, name: str | None = None, **attrs):
        """Generic builder: ``g.op("softmax", x, axis=1)`` for any declared kind."""
        return self.add_node(kind, inputs, attrs, shape=shape, name=name)

    def set_outputs(self, values: "Value | Iterable[Value | Ref]", names: "Iterable[str | None] | None" = None) -> None:
        """Declare the graph outputs, in the order ``run`` returns them. ``names`` label
        them (default: the producing node's name, else ``output<i>``)."""
        if isinstance(values, (Value, Ref)):
            values = [values]
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise ArgumentTypeError(f"graph '{self.name}': set_outputs(values=...) takes graph values, got "
                                    f"{type(values).__name__} {values!r}")
        values = list(values)
        bad = next((v for v in values if not isinstance(v, (Value, Ref, tuple))), None)
        if bad is not None:
            raise ArgumentTypeError(f"graph '{self.name}': set_outputs(values=...) takes graph values, got "
                                    f"{type(bad).__name__} {bad!r} among them")
        refs = [self._ref(v) for v in values]
        if not refs:
            raise GraphError(f"graph '{self.name}': set_outputs needs at least one value")
        names = list(names) if names is not None else [None] * len(refs)
        if len(names) != len(refs):
            raise GraphError(f"graph '{self.name}': {len(refs)} outputs but {len(names)} names")
        self.outputs = refs
        self._output_names = names

    @property
    def output_names(self) -> list[str]:
        out = []
        for i, (ref, name) in enumerate(zip(self.outputs, self._output_names)):
            node = self.nodes[ref.node]
            out.append(name or (node.name if node.name and node.name not in out else f"output{i}"))
        return out

    def _ref(self, v: "Value | Ref") -> Ref:
        if isinstance(v, Value):
            if v.graph is not self:
                raise GraphError(f"{v!r} belongs to graph '{v.graph.name}', not '{self.name}'")
            return v.ref
        if isinstance(v, Ref) or (isinstance(v, tuple) and len(v) == 2):
            ref = Ref(*v)
            if not (0 <= ref.node < len(self.nodes)) or not (0 <= ref.index < len(self.nodes[ref.node].outputs)):
                raise GraphError(f"graph '{self.name}' has no value {ref!r}")
            return ref
        raise GraphError(f"expected a graph value, got {type(v).__name__} {v!r}")

    def value(self, ref: "Ref | int") -> Value:
        """The Value handle for a Ref (or node id)."""
        return Value(self, self._ref(Ref(ref) if isinstance(ref, int) else ref))

    def as_value(self, x: Any, dtype: "DType | None" = None) -> Value:
        """A Value for ``x``: Values pass through; numbers/arrays become constants. A scalar
        given with ``dtype`` (the dtype of the tensor it meets) must fit it: DTypeError
        for ``None``, ``-1`` as u8, ``1.5`` as an integer, ``1e40`` as f32 ..."""
        if isinstance(x, Value):
            return self.value(self._ref(x))
        if dtype is not None and not isinstance(x, (np.ndarray, list, tuple)):
            return self.constant(fit_scalar(x, DType.of(dtype)))
        arr = np.asarray(x, dtype=DType.of(dtype).np if dtype is not None else None)
        if dtype is None and arr.dtype == np.float64 and not isinstance(x, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats default to f32, like the rest of RLX
        if dtype is None and arr.dtype == np.int64 and not isinstance(x, np.ndarray):
            arr = arr.astype(np.int32)
        return self.constant(arr)

    # --- queries --------------------------------------------------------------------
    def shape_of(self, v: "Value | Ref | int") -> Shape:
        ref = self._ref(Ref(v) if isinstance(v, int) else v)
        return self.nodes[ref.node].outputs[ref.index]

    def node_of(self, name: str) -> Node:
        """The input or param node called ``name``."""
        try:
            return self.nodes[self._names[name]]
        except KeyError:
            raise GraphError(f"graph '{self.name}' has no input or param named '{name}'") from None

    @property
    def input_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "input"]

    @property
    def param_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "param"]

    @property
    def input_names(self) -> list[str]:
        return [n.attrs["name"] for n in self.input_nodes]

    @property
    def param_names(self) -> list[str]:
        return [n.attrs["name"] for n in self.param_nodes]

    @property
    def output_shapes(self) -> list[Shape]:
        return [self.shape_of(r) for r in self.outputs]

    def users(self, node_id: int) -> list[Node]:
        return [n for n in self.nodes if any(r.node == node_id for r in n.inputs)]

    def use_count(self, ref: Ref) -> int:
        return sum(1 for n in self.nodes for r in n.inputs if r == ref) + self.outputs.count(ref)

    def kinds(self) -> set[str]:
        """Every op kind used, subgraphs included."""
        out = set()
        for n in self.nodes:
            out.add(n.kind)
            for sub in subgraphs_of(n):
                out |= sub.kinds()
        return out

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __repr__(self) -> str:
        return f"Graph('{self.name}', {len(self.nodes)} nodes, outputs={self.outputs})"

    def pretty(self) -> str:
        """A readable listing, one node per line: ``%3 = matmul(%1, %2) : [1, 2] f32``."""
        lines = [f"graph {self.name}:"]
        for n in self.nodes:
            attrs = ", ".join(f"{k}={_short(v)}" for k, v in n.attrs.items())
            outs = ", ".join(f"{list(s.dims)} {s.dtype}" for s in n.outputs)
            args = ", ".join(map(repr, n.inputs))
            lines.append(f"  %{n.id} = {n.kind}({args}{', ' if args and attrs else ''}{attrs}) : {outs}"
                         + (f"  # {n.name}" if n.name else ""))
        lines.append(f"  return {', '.join(map(repr, self.outputs))}")
        return "\n".join(lines)

    # --- whole-graph services (implemented in their own modules) ---------------------
    def verify(self) -> "Graph":
        from .verify import verify
        verify(self)
        return self

    def fingerprint(self) -> str:
        from .serialize import fingerprint
        return fingerprint(self)

    def to_json(self) -> str:
        from .serialize import to_json
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> "Graph":
        from .serialize import from_json
        return from_json(text)


def fit_scalar(x: Any, dtype: DType) -> np.ndarray:
    """``x``, a Python or numpy scalar meeting a ``dtype`` tensor, as a 0-d array of
    ``dtype``; DTypeError when its value does not fit: not a number, complex for a real
    dtype, not integral or out of range for an integer dtype, not 0/1 for bool, finite but
    beyond the float's range. (numpy would make ``None`` a NaN and wrap ``-1`` to 255.)"""
    value = x.item() if isinstance(x, np.generic) else x
    if not isinstance(value, (bool, int, float, complex)):
        raise DTypeError(f"expected a number or a graph value to combine with a {dtype} tensor, "
                         f"got {type(x).__name__} {x!r}")
    why = _misfit(value, dtype)
    if why:
        raise DTypeError(f"the scalar {x!r} does not fit {dtype}, the dtype of the tensor it is combined "
                         f"with ({why}); cast the tensor (.astype) or pass a constant of the dtype you mean")
    return np.asarray(value.real if isinstance(value, complex) and not dtype.is_complex else value, dtype.np)


def _misfit(value: "bool | int | float | complex", dtype: DType) -> str | None:
    """Why ``value`` does not fit ``dtype``, or None."""
    parts = (value,)
    if isinstance(value, complex):
        if dtype.is_complex:
            parts = (value.real, value.imag)
        elif value.imag != 0:
            return "it has an imaginary part"
        else:
            value = value.real
            parts = (value,)
    if dtype.is_bool:
        return None if value in (0, 1) else "bool holds 0 and 1"
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        if isinstance(value, float) and not value.is_integer():
            return "not an integer"
        return None if info.min <= value <= info.max else f"{dtype} holds {info.min}..{info.max}"
    for part in parts:
        if isinstance(part, float) and not math.isfinite(part):
            continue  # inf and nan exist in every float dtype
        try:
            with np.errstate(over="ignore"):
                finite = np.isfinite(np.asarray(part, dtype.real.np))
        except OverflowError:  # an int beyond any float
            finite = False
        if not finite:
            return f"beyond the range of {dtype}"
    return None


def subgraphs_of(node: Node) -> list[Graph]:
    """The subgraphs a control-flow node carries in its attributes."""
    out = []
    for v in node.attrs.values():
        if isinstance(v, Graph):
            out.append(v)
        elif isinstance(v, tuple) and v and all(isinstance(g, Graph) for g in v):
            out.extend(v)
    return out


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"<array {list(v.shape)} {v.dtype}>"
    if isinstance(v, Graph):
        return f"<graph {v.name}: {len(v)} nodes>"
    if isinstance(v, DType):
        return v.value
    return repr(v)

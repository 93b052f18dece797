"""Nodes of a graph, references to their outputs, and the user-facing Value handle."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from .dtypes import DType
from .shape import Shape

if TYPE_CHECKING:
    from .graph import Graph
    from .schema import OpSchema

__all__ = ["Ref", "Node", "Value"]


class Ref(NamedTuple):
    """Output ``index`` of node ``node``: what node inputs and graph outputs point at."""

    node: int
    index: int = 0

    def __repr__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}.{self.index}"


@dataclass(frozen=True, eq=False)
class Node:
    """One operation. Nodes are appended in a topological order and never mutated."""

    id: int
    kind: str
    inputs: tuple[Ref, ...]
    attrs: Mapping[str, Any]
    outputs: tuple[Shape, ...]
    name: str | None = None

    def __post_init__(self):
        if not isinstance(self.attrs, MappingProxyType):
            object.__setattr__(self, "attrs", MappingProxyType(dict(self.attrs)))

    @property
    def shape(self) -> Shape:
        """The shape of the first (usually only) output."""
        return self.outputs[0]

    @property
    def schema(self) -> "OpSchema":
        from .schema import get_schema
        return get_schema(self.kind)

    @property
    def label(self) -> str:
        """How errors and traces name this node: ``%3 matmul 'proj'``."""
        return f"%{self.id} {self.kind}" + (f" '{self.name}'" if self.name else "")

    def __repr__(self) -> str:
        return f"Node({self.label})"


class Value:
    """A handle on one output of a node, returned by every builder method.

    It knows its graph, so ``x @ w + b``, ``-x``, ``x[:, 1:3]``, ``x.T`` and
    ``x.astype("f16")`` add nodes to that graph. Python numbers on either side of an
    operator become constants of the tensor's dtype.
    """

    __slots__ = ("graph", "ref")

    def __init__(self, graph: "Graph", ref: Ref):
        self.graph = graph
        self.ref = ref

    # --- identity -------------------------------------------------------------------
    def __hash__(self):
        return hash((id(self.graph), self.ref))

    def __eq__(self, other):  # identity of the referenced output, not an elementwise op
        return isinstance(other, Value) and other.graph is self.graph and other.ref == self.ref

    def __repr__(self) -> str:
        return f"Value({self.ref!r}: {self.shape})"

    # --- type information -----------------------------------------------------------
    @property
    def node(self) -> Node:
        return self.graph.nodes[self.ref.node]

    @property
    def shape(self) -> Shape:
        return self.node.outputs[self.ref.index]

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape.dims

    @property
    def dtype(self) -> DType:
        return self.shape.dtype

    @property
    def rank(self) -> int:
        return self.shape.rank

    # --- operators ------------------------------------------------------------------
    def __add__(self, o): return self.graph.add(self, o)
    def __radd__(self, o): return self.graph.add(o, self)
    def __sub__(self, o): return self.graph.sub(self, o)
    def __rsub__(self, o): return self.graph.sub(o, self)
    def __mul__(self, o): return self.graph.mul(self, o)
    def __rmul__(self, o): return self.graph.mul(o, self)
    def __truediv__(self, o): return self.graph.div(self, o)
    def __rtruediv__(self, o): return self.graph.div(o, self)
    def __pow__(self, o): return self.graph.pow(self, o)
    def __rpow__(self, o): return self.graph.pow(o, self)
    def __mod__(self, o): return self.graph.mod(self, o)
    def __matmul__(self, o): return self.graph.matmul(self, o)
    def __rmatmul__(self, o): return self.graph.matmul(o, self)
    def __neg__(self): return self.graph.neg(self)
    def __abs__(self): return self.graph.abs(self)
    def __lt__(self, o): return self.graph.lt(self, o)
    def __le__(self, o): return self.graph.le(self, o)
    def __gt__(self, o): return self.graph.gt(self, o)
    def __ge__(self, o): return self.graph.ge(self, o)
    def __getitem__(self, index): return self.graph.getitem(self, index)

    @property
    def T(self) -> "Value":
        return self.graph.transpose(self)

    def reshape(self, *dims) -> "Value":
        return self.graph.reshape(self, dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims)

    def astype(self, dtype) -> "Value":
        return self.graph.cast(self, dtype)

    def sum(self, axes=None, keepdims=False) -> "Value":
        return self.graph.sum(self, axes, keepdims=keepdims)

    def mean(self, axes=None, keepdims=False) -> "Value":
        return self.graph.mean(self, axes, keepdims=keepdims)

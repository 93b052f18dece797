"""Op schemas: what each op kind takes, which attributes it has, and its shape rule.

Every op kind is declared once with :func:`op`, on its shape rule::

    @op("softmax", inputs="x", attrs={"axis": Attr("int", -1)}, dtypes=FLOATS)
    def softmax(a, x):
        '''softmax(x)_i = exp(x_i - max x) / sum_j exp(x_j - max x) along ``axis``.'''
        a.axis = normalize_axis(a.axis, x.rank)
        return x

The rule receives the attributes (``a``, writable so that it can canonicalize them, e.g.
turn a negative axis into a positive one) and the input :class:`Shape` s, and returns
the output Shape (or a tuple of Shapes for multi-output kinds). It raises
:class:`ShapeError` / :class:`DTypeError` on bad inputs; the graph adds the node's
label to the message. The rule's docstring is the op's documentation; the reference
interpreter (``rlx_core.reference``) defines its numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import DTypeError, GraphError, OpAttributeError
from .dtypes import DType
from .shape import Shape

__all__ = ["Attr", "Attrs", "OpSchema", "op", "get_schema", "all_schemas", "REQUIRED",
           "same_dtype", "expect_dtype"]

REQUIRED = object()

# Attribute kinds and how a given value is checked/converted into its canonical form.
_ATTR_KINDS: dict[str, Callable[[Any], Any]] = {}


def _attr_kind(name):
    def deco(fn):
        _ATTR_KINDS[name] = fn
        return fn
    return deco


@_attr_kind("int")
def _to_int(v):
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TypeError(f"expected an integer, got {v!r}")
    return int(v)


@_attr_kind("float")
def _to_float(v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise TypeError(f"expected a number, got {v!r}")
    return float(v)


@_attr_kind("bool")
def _to_bool(v):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"expected True or False, got {v!r}")
    return bool(v)


@_attr_kind("str")
def _to_str(v):
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {v!r}")
    return v


@_attr_kind("ints")
def _to_ints(v):
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"expected a sequence of integers, got {v!r}")
    return tuple(_to_int(x) for x in v)


@_attr_kind("floats")
def _to_floats(v):
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise TypeError(f"expected a sequence of numbers, got {v!r}")
    return tuple(_to_float(x) for x in v)


@_attr_kind("dtype")
def _to_dtype(v):
    return DType.of(v)


@_attr_kind("array")
def _to_array(v):
    arr = np.array(v, copy=True)
    arr.setflags(write=False)
    return arr


@_attr_kind("graph")
def _to_graph(v):
    from .graph import Graph  # subgraph attributes hold whole graphs
    if not isinstance(v, Graph):
        raise TypeError(f"expected a Graph, got {type(v).__name__}")
    return v


@_attr_kind("graphs")
def _to_graphs(v):
    return tuple(_to_graph(g) for g in v)


@_attr_kind("any")
def _to_any(v):
    return v


@dataclass(frozen=True)
class Attr:
    """One attribute of an op kind: its kind (see ``_ATTR_KINDS``), default and meaning.

    ``optional=True`` allows ``None`` as a value (meaning "absent").
    """

    kind: str
    default: Any = REQUIRED
    doc: str = ""
    optional: bool = False

    def convert(self, value):
        if value is None and (self.optional or self.default is None):
            return None
        return _ATTR_KINDS[self.kind](value)


class Attrs:
    """Attribute values of one node while its shape rule runs (attribute access)."""

    def __init__(self, values: dict[str, Any]):
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        if name not in self._values:
            raise AttributeError(f"no attribute {name!r}")
        self._values[name] = value


@dataclass
class OpSchema:
    """The declaration of one op kind (see module docstring)."""

    kind: str
    inputs: tuple[str, ...]
    attrs: dict[str, Attr]
    rule: Callable[..., Any]
    dtypes: frozenset[DType] | None
    group: str
    doc: str = ""
    custom: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def variadic(self) -> bool:
        return bool(self.inputs) and self.inputs[-1].startswith("*")

    @property
    def min_inputs(self) -> int:
        return sum(1 for n in self.inputs if not n.endswith("?") and not n.startswith("*"))

    @property
    def max_inputs(self) -> int | None:
        return None if self.variadic else len(self.inputs)

    def bind_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Check given attribute values against the declaration; fill defaults."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise OpAttributeError(
                f"{self.kind} has no attribute(s) {sorted(unknown)}; "
                f"known: {sorted(self.attrs) or 'none'}")
        out = {}
        for name, spec in self.attrs.items():
            if name in given:
                try:
                    out[name] = spec.convert(given[name])
                except (TypeError, ValueError) as e:
                    raise OpAttributeError(f"{self.kind} attribute '{name}': {e}") from None
            elif spec.default is REQUIRED:
                raise OpAttributeError(f"{self.kind} needs attribute '{name}' ({spec.doc or spec.kind})")
            else:
                out[name] = spec.default
        return out

    def check_arity(self, n: int) -> None:
        hi = self.max_inputs
        if n < self.min_inputs or (hi is not None and n > hi):
            want = f"{self.min_inputs}" if hi == self.min_inputs else (
                f"{self.min_inputs}..{hi}" if hi is not None else f"at least {self.min_inputs}")
            raise GraphError(f"{self.kind} takes {want} input(s) ({', '.join(self.inputs)}), got {n}")

    def infer(self, in_shapes: list[Shape], attrs: dict[str, Any]) -> tuple[Shape, ...]:
        """Run the shape rule; returns output shapes and canonicalizes ``attrs`` in place."""
        self.check_arity(len(in_shapes))
        if self.dtypes is not None and in_shapes and in_shapes[0].dtype not in self.dtypes:
            raise DTypeError(
                f"{self.kind} does not accept {in_shapes[0].dtype} inputs; "
                f"accepted: {', '.join(sorted(d.value for d in self.dtypes))}")
        out = self.rule(Attrs(attrs), *in_shapes)
        return (out,) if isinstance(out, Shape) else tuple(out)


_SCHEMAS: dict[str, OpSchema] = {}


def op(kind: str, *, inputs: "str | Iterable[str]" = (), attrs: dict[str, Attr] | None = None,
       dtypes: Iterable[DType] | None = None, group: str | None = None, custom: bool = False,
       replace: bool = False, **meta):
    """Declare an op kind on its shape rule (decorator). See the module docstring.

    ``inputs`` names the inputs in order; ``name?`` marks an optional trailing input and
    ``*name`` a variadic tail. ``dtypes`` restricts the dtype of the first input (or of
    the output for source ops, which take no inputs).
    """
    names = (inputs,) if isinstance(inputs, str) else tuple(inputs)

    def deco(rule):
        if kind in _SCHEMAS and not replace:
            raise GraphError(f"op kind '{kind}' is already declared")
        _SCHEMAS[kind] = OpSchema(
            kind=kind, inputs=names, attrs=dict(attrs or {}), rule=rule,
            dtypes=frozenset(dtypes) if dtypes is not None else None,
            group=group or rule.__module__.rsplit(".", 1)[-1],
            doc=(rule.__doc__ or "").strip(), custom=custom, meta=meta)
        return rule
    return deco


def get_schema(kind: str) -> OpSchema:
    try:
        return _SCHEMAS[kind]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(kind, _SCHEMAS, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GraphError(f"unknown op kind '{kind}'{hint}") from None


def all_schemas() -> dict[str, OpSchema]:
    return dict(_SCHEMAS)


def same_dtype(kind_or_what: str, *shapes: Shape) -> DType:
    """All shapes must share one dtype; return it."""
    dts = {s.dtype for s in shapes}
    if len(dts) > 1:
        raise DTypeError(f"{kind_or_what} needs equal dtypes, got {', '.join(str(s.dtype) for s in shapes)}")
    return shapes[0].dtype


def expect_dtype(what: str, shape: Shape, allowed: Iterable[DType]) -> None:
    allowed = frozenset(allowed)
    if shape.dtype not in allowed:
        raise DTypeError(f"{what} must be one of {', '.join(sorted(d.value for d in allowed))}, "
                         f"got {shape.dtype}")

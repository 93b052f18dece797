"""Elementwise ops: unary functions, broadcasting binary ops, compares, where, cast.

Binary, compare and where broadcast both ways as numpy does. The ops themselves
require equal operand dtypes; the builder methods promote mixed operands (see
``rlx_core.ir.dtypes.promote``) by inserting explicit ``cast`` nodes, and turn Python
numbers into rank-0 constants of the other operand's dtype.
"""
from __future__ import annotations

from ..dtypes import COMPLEX, FLOATS, INTS, NUMERIC, DType, promote
from ..schema import Attr, op, same_dtype
from ..shape import Shape, broadcast_dims

SIGNED = FLOATS | {DType.I8, DType.I16, DType.I32, DType.I64}
REAL = FLOATS | INTS
BOOL = frozenset({DType.BOOL})

# kind -> (accepted dtypes, definition). One shape rule serves them all.
UNARY: dict[str, tuple[frozenset, str]] = {
    "neg": (SIGNED | COMPLEX, "-x"),
    "abs": (SIGNED | COMPLEX, "|x|; complex input gives its real-typed magnitude"),
    "exp": (FLOATS, "e**x"),
    "log": (FLOATS, "natural logarithm (-inf at 0, nan below)"),
    "sqrt": (FLOATS, "square root (nan below 0)"),
    "rsqrt": (FLOATS, "1 / sqrt(x)"),
    "reciprocal": (FLOATS, "1 / x"),
    "sin": (FLOATS, "sine"),
    "cos": (FLOATS, "cosine"),
    "tan": (FLOATS, "tangent"),
    "atan": (FLOATS, "arc tangent"),
    "tanh": (FLOATS, "hyperbolic tangent"),
    "sigmoid": (FLOATS, "1 / (1 + e**-x)"),
    "relu": (SIGNED, "max(x, 0)"),
    "gelu": (FLOATS, "x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (exact, erf form)"),
    "gelu_tanh": (FLOATS, "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))) (tanh approximation)"),
    "silu": (FLOATS, "x * sigmoid(x)"),
    "softplus": (FLOATS, "log(1 + e**x), computed without overflow"),
    "erf": (FLOATS, "Gauss error function"),
    "floor": (FLOATS, "largest integer <= x"),
    "ceil": (FLOATS, "smallest integer >= x"),
    "round": (FLOATS, "nearest integer, ties to even"),
    "sign": (SIGNED, "-1 where x < 0, 0 where x == 0, 1 where x > 0; nan stays nan"),
    "logical_not": (BOOL, "not x"),
}

# kind -> (accepted dtypes, definition)
BINARY: dict[str, tuple[frozenset, str]] = {
    "add": (NUMERIC, "a + b"),
    "sub": (NUMERIC, "a - b"),
    "mul": (NUMERIC, "a * b"),
    "div": (NUMERIC, "a / b; integers truncate toward zero (C / ONNX), division by 0 is undefined for ints"),
    "pow": (FLOATS, "a ** b"),
    "max": (REAL, "elementwise maximum (nan if either is nan)"),
    "min": (REAL, "elementwise minimum (nan if either is nan)"),
    "mod": (REAL, "remainder: sign of b (Python/numpy floor mod) by default, sign of a with fmod=True"),
    "atan2": (FLOATS, "angle of the point (b, a): atan2(a, b)"),
    "logical_and": (BOOL, "a and b"),
    "logical_or": (BOOL, "a or b"),
    "logical_xor": (BOOL, "a xor b"),
}
BINARY_ATTRS = {"mod": {"fmod": Attr("bool", False, "C fmod semantics (result has the sign of a)")}}

COMPARE: dict[str, str] = {
    "eq": "a == b", "ne": "a != b", "lt": "a < b", "le": "a <= b", "gt": "a > b", "ge": "a >= b",
}


def _declare_unary(kind, dtypes, doc):
    def rule(a, x):
        return x.with_dtype(x.dtype.real) if kind == "abs" else x
    rule.__doc__ = f"{kind}(x) = {doc}. Output has the input's shape and dtype."
    op(kind, inputs="x", dtypes=dtypes, group="elementwise", unary=True)(rule)


def _declare_binary(kind, dtypes, doc):
    def rule(a, x, y):
        dt = same_dtype(kind, x, y)
        return Shape(broadcast_dims(x.dims, y.dims), dt)
    rule.__doc__ = f"{kind}(a, b) = {doc}, with numpy broadcasting; operands share one dtype."
    op(kind, inputs=("a", "b"), attrs=BINARY_ATTRS.get(kind), dtypes=dtypes, group="elementwise",
       binary=True)(rule)


def _declare_compare(kind, doc):
    def rule(a, x, y):
        same_dtype(kind, x, y)
        return Shape(broadcast_dims(x.dims, y.dims), DType.BOOL)
    rule.__doc__ = f"{kind}(a, b) = {doc} -> bool, with numpy broadcasting (nan compares unequal)."
    dts = (REAL | BOOL | COMPLEX) if kind in ("eq", "ne") else REAL
    op(kind, inputs=("a", "b"), dtypes=dts, group="elementwise", compare=True)(rule)


for _k, (_d, _doc) in UNARY.items():
    _declare_unary(_k, _d, _doc)
for _k, (_d, _doc) in BINARY.items():
    _declare_binary(_k, _d, _doc)
for _k, _doc in COMPARE.items():
    _declare_compare(_k, _doc)


@op("where", inputs=("cond", "a", "b"), dtypes=BOOL)
def where(a, c, x, y):
    """where(cond, a, b): a where cond is true, else b; all three broadcast together."""
    dt = same_dtype("where", x, y)
    return Shape(broadcast_dims(c.dims, x.dims, y.dims), dt)


@op("cast", inputs="x", attrs={"to": Attr("dtype")})
def cast(a, x):
    """Convert to ``to``. float->int truncates toward zero (out-of-range values are
    undefined); ->bool is ``x != 0``; bool->number is 0/1; complex->real keeps the real
    part; int->narrower int wraps; float narrowing rounds to nearest even."""
    return x.with_dtype(a.to)


class ElementwiseBuilders:
    def _unary(self, kind, x, name=None, shape=None):
        return self.add_node(kind, (self.as_value(x),), shape=shape, name=name)

    def _binary(self, kind, a, b, name=None, shape=None, **attrs):
        a, b = self.promote_operands(a, b)
        return self.add_node(kind, (a, b), attrs, shape=shape, name=name)

    def promote_operands(self, *xs):
        """Values for ``xs`` with one common dtype: numbers take the tensors' dtype."""
        from ..node import Value
        dts = [x.dtype for x in xs if isinstance(x, Value)]
        if not dts:
            vals = [self.as_value(x) for x in xs]
            dts = [v.dtype for v in vals]
            xs = vals
        common = dts[0]
        for d in dts[1:]:
            common = promote(common, d)
        return [self.cast(x, common) if isinstance(x, Value) else self.as_value(x, common) for x in xs]

    def where(self, cond, a, b, *, name=None, shape=None):
        a, b = self.promote_operands(a, b)
        return self.add_node("where", (self.as_value(cond, DType.BOOL), a, b), shape=shape, name=name)

    def cast(self, x, to, *, name=None, shape=None):
        """Cast to dtype ``to``; a no-op (returns ``x``) when it already has that dtype."""
        x = self.as_value(x)
        to = DType.of(to)
        if x.dtype is to and shape is None:
            return x
        return self.add_node("cast", (x,), {"to": to}, shape=shape, name=name)


def _unary_builder(kind):
    def method(self, x, *, name=None, shape=None):
        return self._unary(kind, x, name, shape)
    method.__name__ = kind
    method.__doc__ = f"{kind}(x) = {UNARY[kind][1]}."
    return method


def _binary_builder(kind):
    def method(self, a, b, shape=None, *, name=None, **attrs):
        return self._binary(kind, a, b, name, shape, **attrs)
    method.__name__ = kind
    method.__doc__ = f"{kind}(a, b) = {BINARY.get(kind, (None, COMPARE.get(kind)))[1]} (broadcasting)."
    return method


for _k in UNARY:
    setattr(ElementwiseBuilders, _k, _unary_builder(_k))
for _k in list(BINARY) + list(COMPARE):
    setattr(ElementwiseBuilders, _k, _binary_builder(_k))

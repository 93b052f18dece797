"""Fused elementwise kernels: a chain of elementwise ops as one CUDA C kernel.

A kernel loops over an index space (``dims``). Every tensor it touches is read or
written through an :class:`Access`: an element offset plus one stride per loop dim
(0 broadcasts, negative strides walk backwards). The same machinery therefore runs
broadcasting ops, copies of transposed / sliced / broadcast views, writes into a
slice of a larger buffer (concat), and any mix of them, as one launch.

The body is SSA: ``values[0:len(inputs)]`` are the loaded inputs, each
:class:`FusedOp` appends one value. Values are computed in their dtype's compute
type (f32 for f16/bf16) and rounded to the node's dtype after every op, so a fused
chain gives the same bits as the same ops run one by one (the reference rule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlx_core.errors import UnsupportedOpError
from rlx_core.ir import DType

from ..dtypes import device_type, index_ctype
from .preamble import KERNEL_NAME, PREAMBLE

__all__ = ["Access", "FusedOp", "FusedKernel", "contiguous_strides", "broadcast_access", "coalesce",
           "ELEMENTWISE_KINDS", "op_expression", "cast_expression"]


@dataclass(frozen=True)
class Access:
    """How a kernel reads or writes one tensor: ``element = offset + sum(c_d * strides[d])``."""

    dtype: DType
    offset: int
    strides: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.of(self.dtype))


@dataclass(frozen=True)
class FusedOp:
    """One SSA instruction: ``kind`` on earlier values ``args`` (indices), giving ``dtype``."""

    kind: str
    args: tuple[int, ...]
    dtype: DType
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "dtype", DType.of(self.dtype))

    def attr(self, name, default=None):
        return dict(self.attrs).get(name, default)


def contiguous_strides(dims: Sequence[int]) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(dims):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def broadcast_access(dtype: DType, value_dims: Sequence[int], loop_dims: Sequence[int],
                     offset: int = 0) -> Access:
    """A contiguous tensor of ``value_dims`` read with numpy broadcasting over ``loop_dims``."""
    lead = len(loop_dims) - len(value_dims)
    own = contiguous_strides(value_dims)
    strides = tuple(0 if d < lead or value_dims[d - lead] == 1 else own[d - lead] for d in range(len(loop_dims)))
    return Access(dtype, offset, strides)


def coalesce(dims: Sequence[int], stride_lists: Sequence[Sequence[int]]):
    """Drop size-1 loop dims and merge neighbours that every access walks as one
    (``stride[d] == stride[d+1] * dims[d+1]``): fewer divisions per element.
    Returns ``(dims, stride_lists)`` describing the same elements in the same order."""
    keep = [d for d, n in enumerate(dims) if n != 1]
    out_dims = [dims[d] for d in keep]
    out_strides = [[s[d] for d in keep] for s in stride_lists]
    d = len(out_dims) - 2
    while d >= 0:
        if all(s[d] == s[d + 1] * out_dims[d + 1] for s in out_strides):
            out_dims[d] *= out_dims[d + 1]
            del out_dims[d + 1]
            for s in out_strides:
                s[d] = s[d + 1]
                del s[d + 1]
        d -= 1
    return tuple(out_dims), [tuple(s) for s in out_strides]


# --- op semantics as C expressions ---------------------------------------------------
Expr = Callable[[list[str], DType, "FusedOp"], str]


def _fn(name: str) -> Expr:
    return lambda a, dt, op: f"{name}({', '.join(a)})"


def _infix(symbol: str) -> Expr:
    return lambda a, dt, op: f"({a[0]} {symbol} {a[1]})"


_UNARY_FN = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "atan", "tanh",
             "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "softplus", "erf", "floor", "ceil", "round", "sign"]
_BINARY_FN = ["add", "sub", "mul", "div", "pow", "max", "min", "atan2"]
_OPS: dict[str, Expr] = {k: _fn(f"rlx_{k}") for k in _UNARY_FN + _BINARY_FN}
_OPS.update({
    "mod": lambda a, dt, op: f"{'rlx_fmod' if op.attr('fmod') else 'rlx_mod'}({a[0]}, {a[1]})",
    "logical_not": lambda a, dt, op: f"(!{a[0]})",
    "logical_and": _infix("&&"), "logical_or": _infix("||"), "logical_xor": _infix("!="),
    "lt": _infix("<"), "le": _infix("<="), "gt": _infix(">"), "ge": _infix(">="),
    "where": lambda a, dt, op: f"({a[0]} ? {a[1]} : {a[2]})",
    "copy": lambda a, dt, op: a[0],
})
for _cmp in ("eq", "ne"):  # complex numbers need the helper; everything else compares directly
    _OPS[_cmp] = (lambda sym, name: lambda a, dt, op: f"{name}({a[0]}, {a[1]})" if dt.is_complex
                  else f"({a[0]} {sym} {a[1]})")("==" if _cmp == "eq" else "!=", f"rlx_{_cmp}")

ELEMENTWISE_KINDS = frozenset(_OPS) | {"cast", "quantize", "dequantize"} - {"copy"}


def cast_expression(value: str, src: DType, dst: DType) -> str:
    """``value`` (in ``src``'s compute type) converted as the ``cast`` op defines."""
    to = device_type(dst).compute
    if dst.is_bool:
        return f"({value}.re != 0)" if src.is_complex else f"({value} != 0)"
    if dst.is_complex:
        part = device_type(dst.real).compute
        if src.is_complex:
            return f"rlx_cplx(({part}){value}.re, ({part}){value}.im)"
        return f"rlx_cplx(({part})({value}), ({part})0)"
    if src.is_complex:  # complex -> real keeps the real part
        return f"(({to})({value}.re))"
    return f"(({to})({value}))"


def _quantize(a: list[str], dt: DType, op: FusedOp) -> str:
    ct = device_type(dt).compute
    info = {DType.I8: (-128, 127), DType.U8: (0, 255)}[op.dtype]
    zero = f"({ct})({a[2]})" if len(a) > 2 else f"({ct})0"
    q = f"(rlx_round({a[0]} / {a[1]}) + {zero})"
    return f"(({device_type(op.dtype).compute})rlx_clamp({q}, ({ct}){info[0]}, ({ct}){info[1]}))"


def _dequantize(a: list[str], dt: DType, op: FusedOp) -> str:
    ct = device_type(op.dtype).compute
    diff = f"((long long)({a[0]}) - (long long)({a[2]}))" if len(a) > 2 else f"((long long)({a[0]}))"
    return f"(({ct}){diff} * {a[1]})"


def op_expression(op: FusedOp, args: list[str], in_dtype: DType) -> str:
    """The C expression computing ``op`` on its operands (already in compute types)."""
    if op.kind == "cast":
        return cast_expression(args[0], in_dtype, op.dtype)
    if op.kind == "quantize":
        return _quantize(args, in_dtype, op)
    if op.kind == "dequantize":
        return _dequantize(args, in_dtype, op)
    try:
        return _OPS[op.kind](args, in_dtype, op)
    except KeyError:
        raise UnsupportedOpError("cuda", [(op.kind, "not an elementwise kind of the CUDA generator")]) from None


_ROUND = {DType.F16: "rlx_round_f16", DType.BF16: "rlx_round_bf16"}


@dataclass
class FusedKernel:
    """A fused elementwise kernel over ``dims``: ``inputs`` accesses, SSA ``ops``,
    ``outputs`` as (value index, access) pairs. ``source()`` is its CUDA C."""

    dims: tuple[int, ...]
    inputs: list[Access]
    ops: list[FusedOp]
    outputs: list[tuple[int, Access]]
    value_dtypes: list[DType] = field(init=False)

    def __post_init__(self):
        self.dims = tuple(self.dims)
        self.value_dtypes = [a.dtype for a in self.inputs] + [op.dtype for op in self.ops]

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def source(self) -> str:
        accesses = self.inputs + [acc for _, acc in self.outputs]
        dims, strides = coalesce(self.dims, [a.strides for a in accesses])
        n = math.prod(dims)
        reach = max([n] + [abs(a.offset) + sum(abs(s) * (d - 1) for s, d in zip(st, dims))
                           for a, st in zip(accesses, strides)])
        idx = "unsigned int" if n < 2**31 else "unsigned long long"
        off = index_ctype(reach)
        params = [f"const {device_type(a.dtype).store}* in{i}" for i, a in enumerate(self.inputs)]
        params += [f"{device_type(a.dtype).store}* out{i}" for i, (_, a) in enumerate(self.outputs)]
        body = [f"  for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u; "
                f"i += ({idx})gridDim.x * blockDim.x) {{"]
        body += _coords(dims, idx)
        for i, (acc, st) in enumerate(zip(self.inputs, strides)):
            ct = device_type(acc.dtype)
            body.append(f"    const {ct.compute} v{i} = {ct.load_from(f'in{i}[{_offset(acc.offset, st, off)}]')};")
        for j, op in enumerate(self.ops):
            k = len(self.inputs) + j
            in_dt = self.value_dtypes[op.args[0]]
            expr = op_expression(op, [f"v{a}" for a in op.args], in_dt)
            if op.dtype in _ROUND:
                expr = f"{_ROUND[op.dtype]}({expr})"
            body.append(f"    const {device_type(op.dtype).compute} v{k} = {expr};")
        for i, ((value, acc), st) in enumerate(zip(self.outputs, strides[len(self.inputs):])):
            body.append(f"    out{i}[{_offset(acc.offset, st, off)}] = {device_type(acc.dtype).to_store(f'v{value}')};")
        body.append("  }")
        return (PREAMBLE + f'extern "C" __global__ void {KERNEL_NAME}({", ".join(params)}) {{\n'
                + "\n".join(body) + "\n}\n")


def _coords(dims: Sequence[int], idx: str) -> list[str]:
    """Decompose the flat index ``i`` into one coordinate per loop dim (last fastest)."""
    if len(dims) <= 1:
        return [f"    const {idx} c0 = i;"] if dims else []
    lines = [f"    {idx} rem = i;"]
    for d in range(len(dims) - 1, 0, -1):
        lines.append(f"    const {idx} c{d} = rem % {dims[d]}u; rem /= {dims[d]}u;")
    lines.append(f"    const {idx} c0 = rem;")
    return lines


def _offset(offset: int, strides: Sequence[int], off_type: str) -> str:
    terms = [f"({off_type})c{d} * {s}" for d, s in enumerate(strides) if s != 0]
    if offset or not terms:
        terms.insert(0, str(offset))
    return " + ".join(terms)

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

import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlx_core.errors import UnsupportedOpError
from rlx_core.ir import DType

from ..dtypes import device_type, index_ctype
from .preamble import KERNEL_NAME, PREAMBLE

__all__ = ["Access", "FusedOp", "FusedKernel", "ConcatKernel", "contiguous_strides", "broadcast_access", "coalesce",
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
                     offset: int = 0, strides: Sequence[int] | None = None) -> Access:
    """A tensor of ``value_dims`` (contiguous, or laid out with element ``strides``) read
    with numpy broadcasting over ``loop_dims``."""
    lead = len(loop_dims) - len(value_dims)
    own = contiguous_strides(value_dims) if strides is None else tuple(strides)
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
    ``outputs`` as (value index, access) pairs. ``source()`` is its CUDA C.

    When the innermost loop dim is contiguous (or broadcast) in every access, each
    thread handles ``width`` consecutive elements (up to 16 bytes per access, see
    :func:`vector_width`) with one vector load / store per access; launch ``threads``."""

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

    def _loop(self):
        """The coalesced loop dims, every access's strides over them, the vector width."""
        accesses = self.inputs + [acc for _, acc in self.outputs]
        dims, strides = coalesce(self.dims, [a.strides for a in accesses])
        return dims, strides, vector_width(dims, accesses, strides)

    @property
    def threads(self) -> int:
        dims, _, width = self._loop()
        return math.prod(dims) // width

    def source(self) -> str:
        accesses = self.inputs + [acc for _, acc in self.outputs]
        dims, strides, w = self._loop()
        n = math.prod(dims)
        idx = "unsigned int" if n < 2**31 else "unsigned long long"
        off = index_ctype(_reach(dims, [(a.offset, st) for a, st in zip(accesses, strides)]))
        params = [f"const {device_type(a.dtype).store}* in{i}" for i, a in enumerate(self.inputs)]
        params += [f"{device_type(a.dtype).store}* out{i}" for i, (_, a) in enumerate(self.outputs)]
        packs = {}  # vector struct of each stored type

        def pack(dtype: DType) -> str:
            store = device_type(dtype).store
            name = f"rlx_pack_{store.replace(' ', '_')}_{w}"
            packs[name] = f"struct __align__({w * dtype.itemsize}) {name} {{ {store} x[{w}]; }};"
            return name
        scalar = set()  # values held once per thread (broadcast inputs when vectorized)
        lane = "[e]" if w > 1 else ""

        def value(k: int) -> str:
            return f"v{k}" if k in scalar else f"v{k}{lane}"
        head = f"  for ({idx} t = ({idx})blockIdx.x * blockDim.x + threadIdx.x; t < {n // w}u; " \
               f"t += ({idx})gridDim.x * blockDim.x) {{"
        body = [head, f"    const {idx} i = t{f' * {w}u' if w > 1 else ''};", *_coords(dims, idx)]
        for i, (acc, st) in enumerate(zip(self.inputs, strides)):
            ct = device_type(acc.dtype)
            at = _offset(acc.offset, st, off)
            if w == 1 or st[-1] == 0:
                scalar.add(i)
                body.append(f"    const {ct.compute} v{i} = {ct.load_from(f'in{i}[{at}]')};")
            else:
                p = pack(acc.dtype)
                body += [f"    const {p} p{i} = *(const {p}*)(in{i} + {at});",
                         f"    {ct.compute} v{i}[{w}];",
                         f"    for (int e = 0; e < {w}; ++e) v{i}[e] = {ct.load_from(f'p{i}.x[e]')};"]
        for j, op in enumerate(self.ops):
            k = len(self.inputs) + j
            in_dt = self.value_dtypes[op.args[0]]
            expr = op_expression(op, [value(a) for a in op.args], in_dt)
            if op.dtype in _ROUND:
                expr = f"{_ROUND[op.dtype]}({expr})"
            ct = device_type(op.dtype).compute
            if w == 1:
                body.append(f"    const {ct} v{k} = {expr};")
            else:
                body += [f"    {ct} v{k}[{w}];", f"    for (int e = 0; e < {w}; ++e) v{k}[e] = {expr};"]
        for i, ((k, acc), st) in enumerate(zip(self.outputs, strides[len(self.inputs):])):
            at, dt = _offset(acc.offset, st, off), device_type(acc.dtype)
            if w == 1:
                body.append(f"    out{i}[{at}] = {dt.to_store(value(k))};")
            else:
                p = pack(acc.dtype)
                body += [f"    {p} q{i};", f"    for (int e = 0; e < {w}; ++e) q{i}.x[e] = {dt.to_store(value(k))};",
                         f"    *({p}*)(out{i} + {at}) = q{i};"]
        body.append("  }")
        return (PREAMBLE + "".join(f"{d}\n" for d in packs.values())
                + f'extern "C" __global__ void {KERNEL_NAME}({", ".join(params)}) {{\n' + "\n".join(body) + "\n}\n")


def vector_width(dims: Sequence[int], accesses: Sequence[Access], strides: Sequence[Sequence[int]]) -> int:
    """Elements per thread of a kernel over (coalesced) ``dims``: the most (a power of
    two, at most 8 and 16 bytes per access) such that every access walks the innermost
    dim contiguously (stride 1, read as vectors) or not at all (stride 0, one scalar),
    and every vector starts aligned: its element offset is a multiple of the width.
    1 when no access is contiguous there."""
    if not dims or any(st[-1] not in (0, 1) for st in strides):
        return 1
    dense = [(a, st) for a, st in zip(accesses, strides) if st[-1] == 1]
    if not dense:
        return 1
    width = min([8] + [16 // a.dtype.itemsize for a, _ in dense])
    while width > 1:
        if dims[-1] % width == 0 and all(a.offset % width == 0 and all(s % width == 0 for s in st[:-1])
                                         for a, st in dense):
            return width
        width //= 2
    return 1


@dataclass
class ConcatKernel:
    """concat along ``axis`` as one launch over the output ``dims``: the element at
    coordinate ``c`` along the axis comes from the input whose slab ``[start, start +
    extent)`` holds ``c``, read through its access (``inputs``: (extent, access) of each
    non-empty input, in order) and written through ``out``. Values are copied as stored."""

    dims: tuple[int, ...]
    axis: int
    inputs: list[tuple[int, Access]]
    out: Access

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    @property
    def threads(self) -> int:
        return self.size

    def source(self) -> str:
        a = self.axis
        accesses = [acc for _, acc in self.inputs] + [self.out]
        pre, pre_st = coalesce(self.dims[:a], [x.strides[:a] for x in accesses])
        post, post_st = coalesce(self.dims[a + 1:], [x.strides[a + 1:] for x in accesses])
        dims = pre + (self.dims[a],) + post
        strides = [p + (x.strides[a],) + q for p, x, q in zip(pre_st, accesses, post_st)]
        # input k's element: its offset shifted back by its start along the axis, then the output coordinates
        starts = itertools.accumulate([0] + [extent for extent, _ in self.inputs])
        placed = [(x.offset - start * st[len(pre)], st) for start, x, st in zip(starts, accesses, strides)]
        placed[-1] = (self.out.offset, strides[-1])
        n = math.prod(dims)
        idx = "unsigned int" if n < 2**31 else "unsigned long long"
        off = index_ctype(_reach(dims, placed))
        store = device_type(self.out.dtype).store
        body = [f"  for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u; "
                f"i += ({idx})gridDim.x * blockDim.x) {{", *_coords(dims, idx), f"    {store} v;"]
        end = 0
        for k, ((extent, _), (offset, st)) in enumerate(zip(self.inputs, placed)):
            end += extent
            test = "" if k == len(self.inputs) - 1 else f"if (c{len(pre)} < {end}u) "
            body.append(f"    {'else ' if k else ''}{test}v = in{k}[{_offset(offset, st, off)}];")
        body += [f"    out[{_offset(*placed[-1], off)}] = v;", "  }"]
        params = [f"const {store}* in{k}" for k in range(len(self.inputs))] + [f"{store}* out"]
        return (PREAMBLE + f'extern "C" __global__ void {KERNEL_NAME}({", ".join(params)}) {{\n'
                + "\n".join(body) + "\n}\n")


def _reach(dims: Sequence[int], placed: Sequence[tuple[int, Sequence[int]]]) -> int:
    """The largest element offset magnitude any (offset, strides) access reaches over ``dims``."""
    n = math.prod(dims)
    return max([n] + [abs(o) + sum(abs(s) * (d - 1) for s, d in zip(st, dims)) for o, st in placed])


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

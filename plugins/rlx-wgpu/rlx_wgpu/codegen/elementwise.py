"""Elementwise kinds (unary, binary, compare, where, cast) as fused WGSL expressions.

A chain of elementwise nodes (a *group*, chosen by ``rlx_wgpu.schedule``) becomes one
kernel: one invocation per output element evaluates the whole expression tree, each
node's value a ``let`` (rounded to f16 where the node is f16, as the reference rounds
every op), reading every outside operand through its own broadcast index. Scalar
constants are inlined as literals instead of being bound.

Values are computed in f32 (f32, f16), i32, u32, bool, ``vec2<f32>`` (c64) or ``vec2<u32>``
(i64, exactly, through the emulation library of ``rlx_wgpu.codegen.int64``).
"""
from __future__ import annotations

from rlx_core.ir import DType, Graph, Node, Ref
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

from ..layout import COMPUTE_TYPES
from .base import KernelContext, load, rounded, store
from .int64 import I64_OPS, cast_from_i64, cast_to_i64
from .wgsl import broadcast_index, grid, linear_id, literal, shader

__all__ = ["ELEMENTWISE_KINDS", "expression", "fused_kernel", "supports"]

ELEMENTWISE_KINDS = frozenset(UNARY) | frozenset(BINARY) | frozenset(COMPARE) | {"where", "cast"}

_FLOAT_UNARY = {
    "neg": "-{0}", "abs": "abs({0})", "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})",
    "rsqrt": "1.0f / sqrt({0})", "reciprocal": "1.0f / {0}", "sin": "sin({0})", "cos": "cos({0})",
    "tan": "tan({0})", "atan": "atan({0})", "tanh": "rlx_tanh({0})", "sigmoid": "rlx_sigmoid({0})",
    "relu": "rlx_relu({0})", "gelu": "0.5f * {0} * (1.0f + rlx_erf({0} * 0.70710678118654752f))",
    "gelu_tanh": "0.5f * {0} * (1.0f + rlx_tanh(0.79788456080286536f * ({0} + 0.044715f * {0} * {0} * {0})))",
    "silu": "{0} * rlx_sigmoid({0})", "softplus": "rlx_softplus({0})", "erf": "rlx_erf({0})",
    "floor": "floor({0})", "ceil": "ceil({0})", "round": "round({0})", "sign": "rlx_sign({0})",
}
_INT_UNARY = {"neg": "-{0}", "abs": "abs({0})", "relu": "max({0}, 0i)",
              "sign": "select(select(0i, 1i, {0} > 0i), -1i, {0} < 0i)"}
_FLOAT_BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}", "pow": "rlx_pow({0}, {1})",
    "max": "rlx_max({0}, {1})", "min": "rlx_min({0}, {1})", "atan2": "atan2({0}, {1})",
}
_INT_BINARY = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
               "max": "max({0}, {1})", "min": "min({0}, {1})"}
_BOOL_BINARY = {"logical_and": "{0} && {1}", "logical_or": "{0} || {1}", "logical_xor": "{0} != {1}"}
_COMPLEX = {"neg": "-{0}", "abs": "rlx_cabs({0})", "add": "{0} + {1}", "sub": "{0} - {1}",
            "mul": "rlx_cmul({0}, {1})", "div": "rlx_cdiv({0}, {1})", "eq": "all({0} == {1})",
            "ne": "!all({0} == {1})"}
_COMPARE = {"eq": "{0} == {1}", "ne": "!({0} == {1})", "lt": "{0} < {1}", "le": "{0} <= {1}",
            "gt": "{0} > {1}", "ge": "{0} >= {1}"}
_UNSIGNED_CASTS = {"i32": "bitcast<i32>({0})", "u32": "bitcast<u32>({0})"}


def _table(kind: str, dtype: DType) -> dict | None:
    """The expression table that defines ``kind`` on compute values of ``dtype``."""
    if dtype is DType.I64:
        return I64_OPS
    if kind in COMPARE:
        return _COMPLEX if dtype is DType.C64 else _COMPARE
    if dtype is DType.C64:
        return _COMPLEX
    if dtype is DType.BOOL:
        return {"logical_not": "!{0}", **_BOOL_BINARY}
    if dtype.is_float:
        return {**_FLOAT_UNARY, **_FLOAT_BINARY, "mod": None}
    if dtype is DType.I32:
        return {**_INT_UNARY, **_INT_BINARY, "mod": None}
    return {**_INT_BINARY, "mod": None}  # u32


def supports(kind: str, dtype: DType, out: DType) -> bool:
    """Whether :func:`expression` defines ``kind`` with operand dtype ``dtype`` and result ``out``."""
    if dtype not in COMPUTE_TYPES or out not in COMPUTE_TYPES:
        return False
    if kind in ("cast", "where"):
        return True
    table = _table(kind, dtype)
    return table is not None and kind in table


def expression(node: Node, dtype: DType, args: list[str]) -> str:
    """WGSL for ``node`` (an elementwise kind) on compute values ``args`` of ``dtype``
    (the first operand's; ``where``'s is its value operands' dtype)."""
    kind, out = node.kind, node.outputs[0].dtype
    if kind == "where":
        return f"select({args[2]}, {args[1]}, {args[0]})"
    if kind == "cast":
        return _cast(args[0], dtype, out)
    if kind == "mod":
        return _mod(dtype, node.attrs["fmod"], *args)
    return _table(kind, dtype)[kind].format(*(f"({a})" if " " in a or a.startswith("-") else a for a in args))


def _mod(dtype: DType, fmod: bool, a: str, b: str) -> str:
    if dtype is DType.I64:
        return I64_OPS["fmod" if fmod else "mod"].format(a, b)
    if dtype.is_float:
        return f"rlx_fmod({a}, {b})" if fmod else f"rlx_fmodf({a}, {b})"
    if dtype is DType.I32:
        return f"rlx_irem({a}, {b})" if fmod else f"rlx_imod({a}, {b})"
    return f"({a}) % ({b})"  # u32: no signs, so both definitions agree


def _cast(x: str, src: DType, dst: DType) -> str:
    """The ``cast`` op on compute values (see its definition in rlx_core.ir.ops.elementwise)."""
    s, d = COMPUTE_TYPES[src], COMPUTE_TYPES[dst]
    if dst is DType.I64:
        return cast_to_i64(x, s)
    if src is DType.I64:
        return cast_from_i64(x, d)
    if src is DType.C64:
        x, s = f"{x}.x", "f32"
        if dst is DType.C64:
            return x.removesuffix(".x")
    if d == "vec2<f32>":
        real = x if s == "f32" else (f"select(0.0f, 1.0f, {x})" if s == "bool" else f"f32({x})")
        return f"vec2<f32>({real}, 0.0f)"
    if s == d:
        return x
    if d == "bool":
        return f"({x} != {literal(0, s)})"
    if s == "bool":
        return f"select({literal(0, d)}, {literal(1, d)}, {x})"
    if s in _UNSIGNED_CASTS and d in _UNSIGNED_CASTS:
        return _UNSIGNED_CASTS[d].format(x)  # i32 <-> u32 wrap (two's complement)
    return f"{d}({x})"  # float -> int truncates toward zero; int -> float rounds


# --- fused kernels ---------------------------------------------------------------------------
def operand_dtype(graph: Graph, node: Node) -> DType:
    """The dtype an elementwise node computes on (``where``: its value operands')."""
    return graph.shape_of(node.inputs[1 if node.kind == "where" else 0]).dtype


def fused_kernel(k: KernelContext, nodes: list[Node]) -> None:
    """Emit one dispatch evaluating the elementwise ``nodes`` (topological order; the last
    one is the root, whose value is stored; the others are used only inside the group)."""
    graph, root = k.graph, nodes[-1]
    out = root.outputs[0]
    if out.size == 0:
        return
    inside = {n.id for n in nodes}
    bindings, slots, loads, value = [], [], [], {}
    for node in nodes:
        for ref in node.inputs:
            if ref.node in inside or ref in value:
                continue
            value[ref] = _leaf(k, ref, out.dims, bindings, slots, loads)
    lines = list(loads)
    for node in nodes:
        args = [value[r] if r in value else f"v{r.node}" for r in node.inputs]
        expr = rounded(node.outputs[0].dtype, expression(node, operand_dtype(graph, node), args))
        lines.append(f"let v{node.id} = {expr};")
    bindings.append(("out", k.storage(out.dtype)))
    slots.append(Ref(root.id))
    body = (f"  let i = {linear_id()};\n  if (i >= {out.size}u) {{ return; }}\n"
            + "".join(f"  {line}\n" for line in lines)
            + f"  out[i] = {store(out.dtype, f'v{root.id}')};")
    k.emit(shader(bindings, body), slots, grid(out.size, 256, k.max_grid))


def _leaf(k: KernelContext, ref: Ref, out_dims, bindings, slots, loads) -> str:
    """The compute value of an outside operand: a literal for a one-element constant, else a
    load through its broadcast index (appending its binding, slot and load line)."""
    shape = k.graph.shape_of(ref)
    producer = k.graph.nodes[ref.node]
    if producer.kind == "constant" and shape.size == 1:
        value = producer.attrs["value"].reshape(())[()]
        return literal(value, COMPUTE_TYPES[shape.dtype])
    name = f"in{len(bindings)}"
    bindings.append((name, k.storage(shape.dtype)))
    slots.append(ref)
    index = broadcast_index("i", out_dims, shape.dims)
    loads.append(f"let {name}_v = {load(shape.dtype, f'{name}[{index}]')};")
    return f"{name}_v"

"""Elementwise kernels: one fused kernel per group of unary / binary / compare / where /
cast nodes (see ``rlx_rocm.schedule``), broadcasting baked into the index arithmetic.

Every op is written out as the reference defines it: nan propagation in ``max``/``min``/
``relu``/``sign``, numpy's floor ``mod`` and complex division, integer arithmetic that
wraps (through the unsigned type of the same width), integer division by 0 or -1 that
cannot trap, and 16-bit floats rounded after every op.
"""
from __future__ import annotations

from rlx_core.ir import DType, Graph, Node, Ref
from rlx_core.ir.ops.elementwise import BINARY, COMPARE, UNARY

from .base import KernelContext, idx_type, linear_loop, groups, strides_of, unravel
from .types import UNSIGNED, ctype, is_complex, literal, load, real_ctype, round_to, store

__all__ = ["ELEMENTWISE_KINDS", "expression", "fused_kernel", "broadcast_index", "cast_expr", "helpers_for",
           "operand_dtype"]

ELEMENTWISE_KINDS = frozenset(UNARY) | frozenset(BINARY) | frozenset(COMPARE) | {"where", "cast"}
_CPREFIX = {DType.C64: "c64", DType.C128: "c128"}

_FLOAT_HELPERS = {
    "sigmoid": "F rlx_sigmoid_F(F x) { F e = exp(-fabs(x)); return x >= (F)0 ? (F)1 / ((F)1 + e) : e / ((F)1 + e); }",
    "softplus": "F rlx_softplus_F(F x) { F m = x > (F)0 ? x : (F)0; if (isnan(x)) return x; "
                "return m + log1p(exp(-fabs(x))); }",
    "gelu": "F rlx_gelu_F(F x) { return (F)0.5 * x * ((F)1 + erf(x / sqrt((F)2))); }",
    "gelu_tanh": "F rlx_gelu_tanh_F(F x) { F c = sqrt((F)2 / M_PI_F_); "
                 "return (F)0.5 * x * ((F)1 + tanh(c * (x + (F)0.044715 * (x * x * x)))); }",
    "silu": "F rlx_silu_F(F x) { F e = exp(-fabs(x)); F s = x >= (F)0 ? (F)1 / ((F)1 + e) : e / ((F)1 + e); "
            "return x * s; }",
    "sign": "F rlx_sign_F(F x) { return x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : x); }",
    "mod": "F rlx_mod_F(F a, F b) { F m = fmod(a, b); if (b == (F)0) return m; "
           "if (m != (F)0) { if ((b < (F)0) != (m < (F)0)) m += b; } else m = copysign((F)0, b); return m; }",
}
_INT_HELPERS = {
    "div": "T rlx_div_T(T a, T b) { if (b == (T)0) return (T)0; SIGNED_DIV return a / b; }",
    "mod": "T rlx_mod_T(T a, T b) { if (b == (T)0) return (T)0; SIGNED_MOD T r = a % b; "
           "FLOOR_FIX return r; }",
    "fmod": "T rlx_fmod_T(T a, T b) { if (b == (T)0) return (T)0; SIGNED_MOD return a % b; }",
}


def helper(kind: str, dt: DType) -> tuple[str, str]:
    """``(function name, definition)`` of the helper of ``kind`` on ``dt``'s compute type."""
    t = ctype(dt)
    if dt.is_float:
        code = _FLOAT_HELPERS[kind].replace("M_PI_F_", "M_PI" if t == "double" else "M_PI_F")
        return f"rlx_{kind}_{t}", code.replace("_F(", f"_{t}(").replace("(F)", f"({t})").replace("F ", f"{t} ")
    signed = dt.is_signed
    u = UNSIGNED[dt]
    code = _INT_HELPERS[kind]
    code = code.replace("SIGNED_DIV", f"if (b == (T)-1) return (T)((U)0 - (U)a);" if signed else "")
    code = code.replace("SIGNED_MOD", "if (b == (T)-1) return (T)0;" if signed else "")
    code = code.replace("FLOOR_FIX", "if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r += b;" if signed else "")
    code = code.replace("(U)", f"({u})").replace("_T(", f"_{t}(").replace("(T)", f"({t})").replace("T ", f"{t} ")
    return f"rlx_{kind}_{t}", code


def operand_dtype(graph: Graph, node: Node) -> DType:
    """The dtype the op computes on: its first input's (``where``: its values')."""
    ref = node.inputs[1] if node.kind == "where" else node.inputs[0]
    return graph.shape_of(ref).dtype


def _wrap(dt: DType, op: str, a: str, b: str) -> str:
    u = UNSIGNED[dt]
    return f"(({ctype(dt)})(({u})({a}) {op} ({u})({b})))"


def expression(node: Node, dt: DType, args: list[str], helpers: dict) -> str:
    """The value of ``node`` (operands ``args`` in the compute type of ``dt``), in the
    compute type of its output, not yet rounded to a 16-bit float."""
    k, t = node.kind, ctype(dt)
    if k == "cast":
        return cast_expr(dt, node.attrs["to"], args[0])
    if k == "where":
        return f"(({args[0]}) ? ({args[1]}) : ({args[2]}))"
    if is_complex(dt):
        return _complex(k, dt, args)
    if k in UNARY:
        return _unary(k, dt, args[0], helpers)
    a, b = args
    if k in COMPARE:
        op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[k]
        return f"((uchar)(({a}) {op} ({b})))"
    if k in ("logical_and", "logical_or", "logical_xor"):
        op = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}[k]
        return f"((uchar)((({a}) != 0) {op} (({b}) != 0)))"
    if k in ("add", "sub", "mul"):
        op = {"add": "+", "sub": "-", "mul": "*"}[k]
        return _wrap(dt, op, a, b) if dt.is_int else f"(({a}) {op} ({b}))"
    if k == "div":
        if dt.is_int:
            return _call(helpers, "div", dt, a, b)
        return f"(({a}) / ({b}))"
    if k == "mod":
        kind = "fmod" if node.attrs["fmod"] else "mod"
        if dt.is_float and kind == "fmod":
            return f"fmod({a}, {b})"
        return _call(helpers, kind, dt, a, b)
    if k == "pow":
        return f"pow({a}, {b})"
    if k == "atan2":
        return f"atan2({a}, {b})"
    if k in ("max", "min"):
        op = ">" if k == "max" else "<"
        if dt.is_float:
            return f"((({a}) {op} ({b}) || isnan({a})) ? ({a}) : ({b}))"
        return f"((({a}) {op} ({b})) ? ({a}) : ({b}))"
    raise NotImplementedError(f"elementwise {k} on {dt}")


def _call(helpers: dict, kind: str, dt: DType, *args: str) -> str:
    name, code = helper(kind, dt)
    helpers[name] = code
    return f"{name}({', '.join(args)})"


def _unary(k: str, dt: DType, x: str, helpers: dict) -> str:
    t = ctype(dt)
    if k == "neg":
        return f"(({t})(({UNSIGNED[dt]})0 - ({UNSIGNED[dt]})({x})))" if dt.is_int else f"(-({x}))"
    if k == "abs":
        if dt.is_int:
            return f"((({x}) < 0) ? (({t})(({UNSIGNED[dt]})0 - ({UNSIGNED[dt]})({x}))) : ({x}))"
        return f"fabs({x})"
    if k == "relu":
        if dt.is_int:
            return f"((({x}) > 0) ? ({x}) : ({t})0)"
        return f"((({x}) > ({t})0 || isnan({x})) ? ({x}) : ({t})0)"
    if k == "sign":
        if dt.is_int:
            return f"(({t})((({x}) > 0) - (({x}) < 0)))"
        return _call(helpers, "sign", dt, x)
    if k == "logical_not":
        return f"((uchar)(({x}) == 0))"
    if k in ("sigmoid", "softplus", "gelu", "gelu_tanh", "silu"):
        return _call(helpers, k, dt, x)
    simple = {"exp": "exp({})", "log": "log({})", "sqrt": "sqrt({})", "sin": "sin({})", "cos": "cos({})",
              "tan": "tan({})", "atan": "atan({})", "tanh": "tanh({})", "erf": "erf({})", "floor": "floor({})",
              "ceil": "ceil({})", "round": "rint({})", "rsqrt": f"(({t})1 / sqrt({{}}))",
              "reciprocal": f"(({t})1 / ({{}}))"}
    return simple[k].format(x)


def _complex(k: str, dt: DType, args: list[str]) -> str:
    p = _CPREFIX[dt]
    if k == "neg":
        return f"(-({args[0]}))"
    if k == "abs":
        return f"{p}_abs({args[0]})"
    a, b = args
    if k in ("add", "sub"):
        return f"(({a}) {'+' if k == 'add' else '-'} ({b}))"
    if k in ("mul", "div"):
        return f"{p}_{k}({a}, {b})"
    if k == "eq":
        return f"((uchar)(({a}).x == ({b}).x && ({a}).y == ({b}).y))"
    if k == "ne":
        return f"((uchar)(({a}).x != ({b}).x || ({a}).y != ({b}).y))"
    raise NotImplementedError(f"elementwise {k} on {dt}")


def cast_expr(src: DType, dst: DType, x: str) -> str:
    """``x`` (compute type of ``src``) converted as the ``cast`` op defines, in the compute
    type of ``dst``, rounded when ``dst`` is a 16-bit float."""
    if src is dst:
        return x
    t = ctype(dst)
    if is_complex(src):
        if is_complex(dst):
            r = real_ctype(dst)
            return f"(({t})(({r})({x}).x, ({r})({x}).y))"
        x, src = f"({x}).x", (DType.F32 if src is DType.C64 else DType.F64)
        if src is dst:
            return x
    if dst is DType.BOOL:
        return f"((uchar)(({x}) != 0))"
    if is_complex(dst):
        r = real_ctype(dst)
        return f"(({t})(({r})({x}), ({r})0))"
    if dst.is_float:
        if dst.is_low_float:
            return round_to(dst, f"((float)({x}))")
        return f"(({t})({x}))"
    return f"(({t})({x}))"  # to an integer: C truncates floats toward zero, wraps integers


def broadcast_index(out_dims, in_dims, coords: list[str]) -> str:
    """The linear index into a row-major operand of ``in_dims`` broadcast to ``out_dims``,
    from the output coordinates ``coords``."""
    if not in_dims or all(d == 1 for d in in_dims):
        return "0"
    lead = len(out_dims) - len(in_dims)
    terms = []
    for k, (d, s) in enumerate(zip(in_dims, strides_of(in_dims))):
        if d == 1:
            continue
        c = coords[lead + k]
        terms.append(c if s == 1 else f"{c} * {s}")
    return " + ".join(terms) or "0"


def helpers_for(dispatch_helpers: dict) -> tuple[str, ...]:
    return tuple(dispatch_helpers.values())


def fused_kernel(k: KernelContext, nodes: list[Node]) -> None:
    """One kernel computing the elementwise group ``nodes`` (root last)."""
    g = k.graph
    root = nodes[-1]
    out = root.outputs[0]
    n = out.size
    inside = {m.id for m in nodes}
    operands: list[Ref] = []
    for m in nodes:
        for r in m.inputs:
            if r.node not in inside and r not in operands and not _inline_constant(g, r):
                operands.append(r)
    idx = idx_type(n)
    params = [(k.buf(f"in{i}", g.shape_of(r).dtype, const=True), r) for i, r in enumerate(operands)]
    params.append((k.buf("out", out.dtype), Ref(root.id)))
    helpers: dict = {}
    lines = []
    coords = unravel("i", out.dims, idx)
    need_coords = any(g.shape_of(r).dims != out.dims and g.shape_of(r).size > 1 for r in operands)
    if need_coords:
        for c, (expr) in enumerate(coords):
            lines.append(f"    const {idx} c{c} = {expr};")
    names = {}
    for i, r in enumerate(operands):
        s = g.shape_of(r)
        if s.dims == out.dims:
            at = "i"
        else:
            at = broadcast_index(out.dims, s.dims, [f"c{c}" for c in range(len(coords))])
        lines.append(f"    const {ctype(s.dtype)} v{r.node}_{r.index} = {load(s.dtype, f'in{i}', at)};")
        names[r] = f"v{r.node}_{r.index}"
    for m in nodes:
        args = []
        for r in m.inputs:
            if r in names:
                args.append(names[r])
            else:
                s = g.shape_of(r)
                args.append(literal(s.dtype, g.nodes[r.node].attrs["value"].reshape(-1)[0]))
        dt = operand_dtype(g, m)
        value = round_to(m.outputs[0].dtype, expression(m, dt, args, helpers)) \
            if m.kind != "cast" else expression(m, dt, args, helpers)
        lines.append(f"    const {ctype(m.outputs[0].dtype)} v{m.id}_0 = {value};")
        names[Ref(m.id)] = f"v{m.id}_0"
    lines.append("    " + store(out.dtype, "out", "i", names[Ref(root.id)]))
    body = linear_loop("i", n, idx, "\n".join(lines))
    k.kernel(params, body, groups(n, k.wg, k.max_groups()), k.wg, helpers=tuple(helpers.values()))


def _inline_constant(graph: Graph, ref: Ref) -> bool:
    node = graph.nodes[ref.node]
    return node.kind == "constant" and graph.shape_of(ref).size == 1

"""WGSL building blocks shared by every kernel generator: literals, index arithmetic
over static shapes, dispatch grids, and shader assembly with the helper functions
(``rlx_*``) a kernel uses.

Shapes are static, so every dimension and stride is baked into the source as a
constant; two nodes with the same shapes and attributes produce the same source and
share one cached pipeline.
"""
from __future__ import annotations

import math
import re
import struct
from typing import Sequence

import numpy as np

from .int64 import I64, I64_HELPERS, i64_literal

__all__ = ["WORKGROUP", "u32", "i32", "f32", "literal", "strides", "unravel", "ravel", "broadcast_index",
           "grid", "linear_id", "row_id", "shader", "HELPERS"]

WORKGROUP = 256  # invocations per workgroup: the WebGPU default maximum


def u32(v: int) -> str:
    return f"{int(v)}u"


def i32(v: int) -> str:
    v = int(v)
    return f"{v}i" if v > -2**31 else "i32(-2147483647 - 1)"


def f32(v: float) -> str:
    """An exact f32 literal: the shortest decimal that rounds back, or the bit pattern."""
    x = np.float32(v)
    if np.isfinite(x) and (x == 0 or abs(x) >= np.finfo(np.float32).tiny):
        text = repr(float(x))
        if np.float32(float(text)) == x:
            return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"
    return f"bitcast<f32>({struct.unpack('<I', struct.pack('<f', x))[0]:#010x}u)"


def literal(value, wgsl_type: str) -> str:
    """``value`` as a WGSL constant of ``wgsl_type`` (f32, i32, u32, bool, vec2<f32>, and
    vec2<u32>: an i64)."""
    if wgsl_type == "f32":
        return f32(value)
    if wgsl_type == "i32":
        return i32(value)
    if wgsl_type == "u32":
        return u32(value)
    if wgsl_type == "bool":
        return "true" if bool(value) else "false"
    if wgsl_type == I64:
        return i64_literal(value)
    if wgsl_type == "vec2<f32>":
        c = complex(value)
        return f"vec2<f32>({f32(c.real)}, {f32(c.imag)})"
    raise ValueError(f"no WGSL literal of type {wgsl_type}")


# --- index arithmetic -------------------------------------------------------------------
def strides(dims: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides."""
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def unravel(index: str, dims: Sequence[int]) -> list[str]:
    """WGSL expressions of the coordinates of flat (u32) ``index`` in ``dims``."""
    out = []
    for d, s in zip(dims, strides(dims)):
        if d == 1:
            out.append("0u")
            continue
        term = index if s == 1 else f"({index} / {u32(s)})"
        out.append(term if s * d >= math.prod(dims) else f"({term} % {u32(d)})")
    return out


def ravel(coords: Sequence[str], st: Sequence[int]) -> str:
    """The flat index ``sum(coords[i] * st[i])`` (terms with stride 0 or coordinate 0 left out)."""
    terms = [c if s == 1 else f"{c} * {u32(s)}" for c, s in zip(coords, st) if s and c != "0u"]
    return " + ".join(terms) if terms else "0u"


def broadcast_index(index: str, out_dims: Sequence[int], in_dims: Sequence[int]) -> str:
    """Flat index into an input of ``in_dims`` broadcast (numpy rules) to ``out_dims``."""
    if tuple(in_dims) == tuple(out_dims):
        return index
    if math.prod(in_dims) == 1:
        return "0u"
    lead = len(out_dims) - len(in_dims)
    in_st = (0,) * lead + tuple(s if d != 1 else 0 for s, d in zip(strides(in_dims), in_dims))
    return ravel(unravel(index, out_dims), in_st)


# --- dispatch grids ----------------------------------------------------------------------
def grid(count: int, per_group: int = 1, max_per_dim: int = 65535) -> tuple[int, int, int]:
    """Workgroups for ``count`` work items of ``per_group`` each, folded into two
    dimensions when there are more than ``max_per_dim`` (see :func:`linear_id`)."""
    groups = max(1, -(-count // per_group))
    x = min(groups, max_per_dim)
    return x, -(-groups // x), 1


def linear_id(wg: int = WORKGROUP) -> str:
    """The flat invocation index on a :func:`grid` (needs ``gid`` and ``nwg`` builtins)."""
    return f"gid.x + gid.y * nwg.x * {u32(wg)}"


def row_id() -> str:
    """The flat workgroup index on a :func:`grid` (needs ``wid`` and ``nwg`` builtins)."""
    return "wid.x + wid.y * nwg.x"


ENTRY = ("@compute @workgroup_size({wg})\n"
         "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,\n"
         "        @builtin(local_invocation_index) lid: u32, @builtin(num_workgroups) nwg: vec3<u32>) {{\n")


def shader(bindings: Sequence[tuple[str, str]], body: str, wg: int = WORKGROUP, decls: str = "") -> str:
    """A complete WGSL module: ``enable f16`` when needed, one read-write storage binding
    per ``(name, element type)``, the ``rlx_*`` helpers ``body`` calls, module-scope
    ``decls`` (workgroup arrays), and ``fn main`` with ``body`` inside."""
    code = decls + ENTRY.format(wg=wg) + body.rstrip() + "\n}\n"
    lines = [f"@group(0) @binding({i}) var<storage, read_write> {name}: array<{t}>;"
             for i, (name, t) in enumerate(bindings)]
    helpers = _helpers_for(code)
    text = "\n".join(lines) + "\n" + helpers + code
    return ("enable f16;\n" if re.search(r"\bf16\b", text) else "") + text


def _helpers_for(code: str) -> str:
    """Definitions of the helpers ``code`` calls, dependencies first."""
    used: list[str] = []
    seen: set[str] = set()

    def visit(text):
        for name in re.findall(r"\b(rlx_\w+)\(", text):
            if name in HELPERS and name not in seen:
                seen.add(name)
                visit(HELPERS[name])
                used.append(name)
    visit(code)
    return "".join(HELPERS[n] for n in used)


# Helper functions: IEEE details WGSL leaves to the implementation, done explicitly so
# that every driver gives the reference's answer (nan propagation, pow of negative
# bases, overflow-free tanh/sigmoid/softplus), and functions WGSL lacks (erf, log1p).
HELPERS = {
    "rlx_isnan": "fn rlx_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n",
    "rlx_max": "fn rlx_max(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, rlx_isnan(a) || rlx_isnan(b)); }\n",
    "rlx_min": "fn rlx_min(a: f32, b: f32) -> f32 { return select(min(a, b), a + b, rlx_isnan(a) || rlx_isnan(b)); }\n",
    "rlx_relu": ("// max(x, 0) keeping nan, decided on the bits (some drivers drop nan from float compares)\n"
                 "fn rlx_relu(x: f32) -> f32 {\n"
                 "  let b = bitcast<u32>(x);\n  return select(x, 0.0f, b > 0x80000000u && b <= 0xff800000u);\n}\n"),
    "rlx_sign": ("fn rlx_sign(x: f32) -> f32 {\n"
                 "  return select(select(select(0.0f, 1.0f, x > 0.0f), -1.0f, x < 0.0f), x, rlx_isnan(x));\n}\n"),
    "rlx_tanh": ("// Cephes tanhf: a polynomial near 0, 1 - 2/(e^2|x| + 1) elsewhere (no inf/inf).\n"
                 "fn rlx_tanh(x: f32) -> f32 {\n"
                 "  let a = abs(x);\n"
                 "  if (a > 0.625f) { let t = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f); return select(t, -t, x < 0.0f); }\n"
                 "  let z = x * x;\n"
                 "  return ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z\n"
                 "           + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;\n}\n"),
    "rlx_sigmoid": ("fn rlx_sigmoid(x: f32) -> f32 {\n"
                    "  let e = exp(-abs(x));\n  return select(e / (1.0f + e), 1.0f / (1.0f + e), x >= 0.0f);\n}\n"),
    "rlx_log1p": ("// log(1 + x) without cancellation for small x (Goldberg's trick).\n"
                  "fn rlx_log1p(x: f32) -> f32 {\n"
                  "  let u = 1.0f + x;\n  if (u == 1.0f) { return x; }\n  return log(u) * x / (u - 1.0f);\n}\n"),
    "rlx_softplus": ("fn rlx_softplus(x: f32) -> f32 {\n"
                     "  return select(max(x, 0.0f), x, rlx_isnan(x)) + rlx_log1p(exp(-abs(x)));\n}\n"),
    "rlx_erf": ("// erf: its Taylor series below 0.5, Numerical Recipes' erfc (rel. error < 1.2e-7) above.\n"
                "fn rlx_erf(x: f32) -> f32 {\n"
                "  let z = abs(x);\n"
                "  if (z < 0.5f) {\n"
                "    let s = x * x;\n"
                "    return 1.1283791671f * x * (1.0f + s * (-1.0f / 3.0f + s * (0.1f + s * (-1.0f / 42.0f\n"
                "           + s * (1.0f / 216.0f + s * (-1.0f / 1320.0f))))));\n"
                "  }\n"
                "  let t = 1.0f / (1.0f + 0.5f * z);\n"
                "  let c = t * exp(-z * z - 1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f\n"
                "          + t * (-0.18628806f + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f\n"
                "          + t * (-0.82215223f + t * 0.17087277f)))))))));\n"
                "  return select(c - 1.0f, 1.0f - c, x >= 0.0f);\n}\n"),
    "rlx_pow": ("// numpy's power: x**0 = 1, 1**y = 1, negative bases with integer exponents.\n"
                "fn rlx_pow(a: f32, b: f32) -> f32 {\n"
                "  if (b == 0.0f || a == 1.0f) { return 1.0f; }\n"
                "  if (rlx_isnan(a) || rlx_isnan(b)) { return a + b; }\n"
                "  var m: f32;\n"
                "  if (a == 0.0f) { m = select(0.0f, bitcast<f32>(0x7f800000u), b < 0.0f); }\n"
                "  else { m = exp2(b * log2(abs(a))); }\n"
                "  if (a >= 0.0f) { return m; }\n"
                "  if (b != trunc(b)) { return bitcast<f32>(0x7fc00000u); }\n"
                "  return select(m, -m, abs(b) < 16777216.0f && (u32(abs(b)) & 1u) == 1u);\n}\n"),
    "rlx_fmod": ("// C fmod: a - trunc(a/b)*b; the rounded quotient may be one too far, which the sign shows.\n"
                 "fn rlx_fmod(a: f32, b: f32) -> f32 {\n"
                 "  let q = trunc(a / b);\n  var r = fma(-q, b, a);\n"
                 "  if (r != 0.0f && (r < 0.0f) != (a < 0.0f)) { r = r + select(-abs(b), abs(b), a > 0.0f); }\n"
                 "  return r;\n}\n"),
    "rlx_fmodf": ("fn rlx_fmodf(a: f32, b: f32) -> f32 {\n"
                  "  let r = rlx_fmod(a, b);\n"
                  "  return select(r, r + b, r != 0.0f && ((r < 0.0f) != (b < 0.0f)));\n}\n"),
    "rlx_irem": ("// C's truncating remainder, spelled out (OpenGL leaves % of negative operands undefined)\n"
                 "fn rlx_irem(a: i32, b: i32) -> i32 { return a - (a / b) * b; }\n"),
    "rlx_imod": ("fn rlx_imod(a: i32, b: i32) -> i32 {\n"
                 "  let r = rlx_irem(a, b);\n  return select(r, r + b, r != 0i && ((r < 0i) != (b < 0i)));\n}\n"),
    "rlx_cdiv": ("fn rlx_cdiv(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {\n"
                 "  let d = dot(b, b);\n"
                 "  return vec2<f32>(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y) / d;\n}\n"),
    "rlx_cmul": ("fn rlx_cmul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {\n"
                 "  return vec2<f32>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);\n}\n"),
    "rlx_cabs": ("fn rlx_cabs(a: vec2<f32>) -> f32 {\n"
                 "  let m = max(abs(a.x), abs(a.y));\n  if (m == 0.0f || m > 3.0e38f) { return m; }\n"
                 "  let s = a / m;\n  return m * sqrt(dot(s, s));\n}\n"),
}
HELPERS.update(I64_HELPERS)  # exact 64-bit integers (rlx_wgpu.codegen.int64)

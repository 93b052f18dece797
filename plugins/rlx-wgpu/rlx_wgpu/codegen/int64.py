"""Exact 64-bit integers in WGSL, which has none: an i64 is a ``vec2<u32>`` (low word,
high word) in two's complement -- numpy's own little-endian layout, so values move
between host and device as they are.

The emulation library is the ``rlx_i64_*`` / ``rlx_u64_*`` helpers below, merged into
``wgsl.HELPERS``: a shader gets the ones it calls (and their dependencies) once, however
many ops use them. Add, sub and neg carry between the words; mul is the low 64 bits of the
product (the 32x32->64 partial product of the low words from 16-bit halves, plus the two
cross products' low words); compares are exact (signed on the high word, unsigned on the
low); div/mod are long division on the magnitudes (one u32 division when both fit in
32 bits); casts to f32 round to nearest even from the exact 64-bit magnitude, casts from
f32 truncate exactly (nan and values beyond +-2^63 give the most negative i64, as x86
and numpy do; the op leaves them undefined). ``rlx_u64_*`` are the unsigned forms the
others are built on. Index inputs (gather family) read i64 indices exactly through
``rlx_index64`` (the device mode's clamp of ``rlx_core.ir.ops.movement``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["I64", "I64_HELPERS", "i64_literal", "I64_OPS", "I64_IDENTITY", "cast_to_i64", "cast_from_i64"]

I64 = "vec2<u32>"  # the WGSL type of an i64 value (the only dtype computed as vec2<u32>)
_T = I64
_MIN, _MAX = "vec2<u32>(0u, 0x80000000u)", "vec2<u32>(0xffffffffu, 0x7fffffffu)"

I64_HELPERS = {
    "rlx_mulhilo": ("// the full 64-bit product of two u32 as (high, low) words, from 16-bit halves\n"
                    "fn rlx_mulhilo(a: u32, b: u32) -> vec2<u32> {\n"
                    "  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;\n"
                    "  let mid = ((a0 * b0) >> 16u) + ((a0 * b1) & 0xffffu) + ((a1 * b0) & 0xffffu);\n"
                    "  return vec2<u32>(a1 * b1 + ((a0 * b1) >> 16u) + ((a1 * b0) >> 16u) + (mid >> 16u), a * b);\n"
                    "}\n"),
    "rlx_i64_add": (f"fn rlx_i64_add(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  let lo = a.x + b.x;\n  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));\n}\n"),
    "rlx_i64_sub": (f"fn rlx_i64_sub(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));\n}\n"),
    "rlx_i64_neg": f"fn rlx_i64_neg(a: {_T}) -> {_T} {{ return rlx_i64_sub(vec2<u32>(), a); }}\n",
    "rlx_i64_mul": (f"fn rlx_i64_mul(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  let p = rlx_mulhilo(a.x, b.x);\n  return vec2<u32>(p.y, p.x + a.x * b.y + a.y * b.x);\n}\n"),
    "rlx_i64_isneg": f"fn rlx_i64_isneg(a: {_T}) -> bool {{ return (a.y >> 31u) != 0u; }}\n",
    "rlx_i64_lt": (f"fn rlx_i64_lt(a: {_T}, b: {_T}) -> bool {{\n"
                   "  let ah = bitcast<i32>(a.y); let bh = bitcast<i32>(b.y);\n"
                   "  return ah < bh || (ah == bh && a.x < b.x);\n}\n"),
    "rlx_u64_lt": f"fn rlx_u64_lt(a: {_T}, b: {_T}) -> bool {{ return a.y < b.y || (a.y == b.y && a.x < b.x); }}\n",
    "rlx_i64_max": f"fn rlx_i64_max(a: {_T}, b: {_T}) -> {_T} {{ return select(a, b, rlx_i64_lt(a, b)); }}\n",
    "rlx_i64_min": f"fn rlx_i64_min(a: {_T}, b: {_T}) -> {_T} {{ return select(a, b, rlx_i64_lt(b, a)); }}\n",
    "rlx_i64_abs": f"fn rlx_i64_abs(a: {_T}) -> {_T} {{ return select(a, rlx_i64_neg(a), rlx_i64_isneg(a)); }}\n",
    "rlx_i64_sign": (f"fn rlx_i64_sign(a: {_T}) -> {_T} {{\n"
                     "  return select(vec2<u32>(select(0u, 1u, any(a != vec2<u32>())), 0u), vec2<u32>(0xffffffffu),"
                     " rlx_i64_isneg(a));\n}\n"),
    "rlx_u64_shl": (f"// shifts by s in [0, 63]\nfn rlx_u64_shl(a: {_T}, s: u32) -> {_T} {{\n"
                    "  if (s == 0u) { return a; }\n  if (s >= 32u) { return vec2<u32>(0u, a.x << (s - 32u)); }\n"
                    "  return vec2<u32>(a.x << s, (a.y << s) | (a.x >> (32u - s)));\n}\n"),
    "rlx_u64_shr": (f"fn rlx_u64_shr(a: {_T}, s: u32) -> {_T} {{\n"
                    "  if (s == 0u) { return a; }\n  if (s >= 32u) { return vec2<u32>(a.y >> (s - 32u), 0u); }\n"
                    "  return vec2<u32>((a.x >> s) | (a.y << (32u - s)), a.y >> s);\n}\n"),
    "rlx_u64_divmod": ("// unsigned n / d and n % d as (q.lo, q.hi, r.lo, r.hi), for d <= 2^63 (i64 magnitudes):\n"
                       "// one u32 division when both fit in a word, else restoring long division\n"
                       f"fn rlx_u64_divmod(n: {_T}, d: {_T}) -> vec4<u32> {{\n"
                       "  if (n.y == 0u && d.y == 0u) { return vec4<u32>(n.x / d.x, 0u, n.x % d.x, 0u); }\n"
                       "  var q = vec2<u32>();\n  var r = vec2<u32>();\n"
                       "  for (var i = 63u; i < 64u; i = i - 1u) {\n"
                       "    r = rlx_u64_shl(r, 1u);\n"
                       "    r.x = r.x | ((select(n.x, n.y, i >= 32u) >> (i & 31u)) & 1u);\n"
                       "    if (!rlx_u64_lt(r, d)) {\n"
                       "      r = rlx_i64_sub(r, d);\n"
                       "      if (i >= 32u) { q.y = q.y | (1u << (i - 32u)); } else { q.x = q.x | (1u << i); }\n"
                       "    }\n  }\n  return vec4<u32>(q, r);\n}\n"),
    "rlx_i64_div": ("// C division: the quotient truncated toward zero\n"
                    f"fn rlx_i64_div(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  let q = rlx_u64_divmod(rlx_i64_abs(a), rlx_i64_abs(b)).xy;\n"
                    "  return select(q, rlx_i64_neg(q), rlx_i64_isneg(a) != rlx_i64_isneg(b));\n}\n"),
    "rlx_i64_rem": ("// C remainder (the sign of a)\n"
                    f"fn rlx_i64_rem(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  let r = rlx_u64_divmod(rlx_i64_abs(a), rlx_i64_abs(b)).zw;\n"
                    "  return select(r, rlx_i64_neg(r), rlx_i64_isneg(a));\n}\n"),
    "rlx_i64_mod": ("// floor remainder (the sign of b), numpy's mod\n"
                    f"fn rlx_i64_mod(a: {_T}, b: {_T}) -> {_T} {{\n"
                    "  let r = rlx_i64_rem(a, b);\n"
                    "  return select(r, rlx_i64_add(r, b), any(r != vec2<u32>()) && rlx_i64_isneg(r) != rlx_i64_isneg(b));"
                    "\n}\n"),
    "rlx_i64_from_f32": ("// truncation toward zero; nan and |x| >= 2^63 give the most negative i64\n"
                         f"fn rlx_i64_from_f32(x: f32) -> {_T} {{\n"
                         f"  if (!(abs(x) < bitcast<f32>(0x5f000000u))) {{ return {_MIN}; }}\n"
                         "  let a = trunc(abs(x));\n  let hi = floor(a * 2.3283064365386963e-10f);\n"
                         "  let m = vec2<u32>(u32(a - hi * 4294967296.0f), u32(hi));\n"
                         "  return select(m, rlx_i64_neg(m), x < 0.0f);\n}\n"),
    "rlx_i64_to_f32": ("// round to nearest even from the exact magnitude (24 bits kept, the rest decides)\n"
                       f"fn rlx_i64_to_f32(a: {_T}) -> f32 {{\n"
                       "  let neg = rlx_i64_isneg(a);\n  let m = select(a, rlx_i64_neg(a), neg);\n"
                       "  var f = f32(m.x);\n"
                       "  if (m.y != 0u || m.x >= 16777216u) {\n"
                       "    let lz = select(countLeadingZeros(m.x) + 32u, countLeadingZeros(m.y), m.y != 0u);\n"
                       "    let sh = 40u - lz;\n    let kept = rlx_u64_shr(m, sh).x;\n"
                       "    let rest = rlx_i64_sub(m, rlx_u64_shl(vec2<u32>(kept, 0u), sh));\n"
                       "    let half = rlx_u64_shl(vec2<u32>(1u, 0u), sh - 1u);\n"
                       "    let up = rlx_u64_lt(half, rest) || (all(rest == half) && (kept & 1u) == 1u);\n"
                       "    f = ldexp(f32(kept + select(0u, 1u, up)), i32(sh));\n  }\n"
                       "  return select(f, -f, neg);\n}\n"),
    "rlx_index": ("// device mode of out-of-range indices: wrap [-n, 0) once, clamp into [0, n - 1]\n"
                  "fn rlx_index(j: i32, n: i32) -> u32 { return u32(clamp(select(j, j + n, j < 0i), 0i, n - 1i)); }\n"),
    "rlx_index64": ("// an i64 index: exact, its low word when it fits in i32, else clamped by its sign\n"
                    f"fn rlx_index64(j: {_T}, n: i32) -> u32 {{\n"
                    "  let lo = bitcast<i32>(j.x);\n"
                    "  if (j.y != select(0u, 0xffffffffu, lo < 0i)) { return select(u32(n - 1i), 0u, rlx_i64_isneg(j)); }\n"
                    "  return rlx_index(lo, n);\n}\n"),
}

# elementwise kinds on i64 compute values ({0}, {1}: the operands)
I64_OPS = {
    "neg": "rlx_i64_neg({0})", "abs": "rlx_i64_abs({0})", "sign": "rlx_i64_sign({0})",
    "relu": "select({0}, vec2<u32>(), rlx_i64_isneg({0}))",
    "add": "rlx_i64_add({0}, {1})", "sub": "rlx_i64_sub({0}, {1})", "mul": "rlx_i64_mul({0}, {1})",
    "div": "rlx_i64_div({0}, {1})", "max": "rlx_i64_max({0}, {1})", "min": "rlx_i64_min({0}, {1})",
    "mod": "rlx_i64_mod({0}, {1})", "fmod": "rlx_i64_rem({0}, {1})",
    "eq": "all({0} == {1})", "ne": "any({0} != {1})", "lt": "rlx_i64_lt({0}, {1})", "le": "!rlx_i64_lt({1}, {0})",
    "gt": "rlx_i64_lt({1}, {0})", "ge": "!rlx_i64_lt({0}, {1})",
}
# reductions' initial values
I64_IDENTITY = {"sum": "vec2<u32>()", "prod": "vec2<u32>(1u, 0u)", "max": _MIN, "min": _MAX}


def i64_literal(value) -> str:
    """``value`` (an integer in i64's range, wrapped like numpy's cast) as a WGSL i64."""
    word = int(np.asarray(value).astype(np.int64)) & (2**64 - 1)
    return f"vec2<u32>({word & 0xFFFFFFFF}u, {word >> 32}u)"


def cast_to_i64(x: str, src: str) -> str:
    """WGSL converting compute value ``x`` of WGSL type ``src`` (f32, i32, u32, bool,
    vec2<f32>) to i64."""
    return {"f32": f"rlx_i64_from_f32({x})", "vec2<f32>": f"rlx_i64_from_f32(({x}).x)",
            "i32": f"vec2<u32>(bitcast<u32>({x}), select(0u, 0xffffffffu, ({x}) < 0i))",
            "u32": f"vec2<u32>({x}, 0u)", "bool": f"vec2<u32>(select(0u, 1u, {x}), 0u)", _T: x}[src]


def cast_from_i64(x: str, dst: str) -> str:
    """WGSL converting i64 ``x`` to WGSL type ``dst``: narrower integers wrap (the low word),
    floats round to nearest even, bool is ``x != 0``."""
    return {"f32": f"rlx_i64_to_f32({x})", "vec2<f32>": f"vec2<f32>(rlx_i64_to_f32({x}), 0.0f)",
            "i32": f"bitcast<i32>(({x}).x)", "u32": f"({x}).x", "bool": f"any(({x}) != vec2<u32>())", _T: x}[dst]

"""Helpers every program starts with: 16-bit float rounding and bf16 storage, complex
arithmetic (numpy's formulas), and the Philox4x32-10 block function of ``rlx_core.rng``.

``FP_CONTRACT OFF``: the compiler may not fuse ``a * b + c`` into one rounding, so that
elementwise chains and the rng's ``low + u * (high - low)`` round like numpy. Kernels that
want fused multiply-adds (the GEMM) call ``fma`` themselves.
"""
from __future__ import annotations

__all__ = ["preamble"]

_COMMON = r"""
#pragma OPENCL FP_CONTRACT OFF
float rt_f16(float f) {
  uint u = as_uint(f);
  uint a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return f;
  if (a >= 0x477ff000u) return as_float((u & 0x80000000u) | 0x7f800000u);
  if (a < 0x38800000u) return copysign(rint(as_float(a) * 16777216.0f) * 5.9604644775390625e-8f, f);
  uint r = (a + 0x0fffu + ((a >> 13) & 1u)) & 0xffffe000u;
  return as_float((u & 0x80000000u) | r);
}
float rt_bf16(float f) {
  if (isnan(f)) return f;
  uint u = as_uint(f);
  return as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
float bf16_load(ushort b) { return as_float(((uint)b) << 16); }
ushort bf16_bits(float f) {
  uint u = as_uint(f);
  if (isnan(f)) return (ushort)((u >> 16) | 0x40u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
uint4 philox10(uint4 c, uint2 k) {
  for (int r = 0; r < 10; r++) {
    uint lo0 = c.x * 0xD2511F53u, hi0 = mul_hi(c.x, 0xD2511F53u);
    uint lo1 = c.z * 0xCD9E8D57u, hi1 = mul_hi(c.z, 0xCD9E8D57u);
    c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    k += (uint2)(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}
uint philox_u32(ulong e, uint2 key) {
  ulong block = e >> 2;
  uint4 c = philox10((uint4)((uint)block, (uint)(block >> 32), 0u, 0u), key);
  uint w = (uint)(e & 3);
  return w == 0 ? c.x : (w == 1 ? c.y : (w == 2 ? c.z : c.w));
}
"""

_COMPLEX = r"""
T2 T2_mul(T2 a, T2 b) { return (T2)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
T2 T2_div(T2 a, T2 b) {
  T ar = fabs(b.x), ai = fabs(b.y);
  if (ar >= ai) {
    if (ar == 0 && ai == 0) return (T2)(a.x / ar, a.y / ar);
    T rat = b.y / b.x, scl = (T)1 / (b.x + b.y * rat);
    return (T2)((a.x + a.y * rat) * scl, (a.y - a.x * rat) * scl);
  }
  T rat = b.x / b.y, scl = (T)1 / (b.y + b.x * rat);
  return (T2)((a.x * rat + a.y) * scl, (a.y * rat - a.x) * scl);
}
T T2_abs(T2 a) { return hypot(a.x, a.y); }
"""


_FUNCTIONS = None


def _functions(fp64: bool) -> list[tuple[str, str]]:
    """``(name, definition)`` of every helper, in dependency order."""
    text = _COMMON.replace("#pragma OPENCL FP_CONTRACT OFF", "")
    text += _COMPLEX.replace("T2", "float2").replace("(T)", "(float)").replace("T ", "float ").replace("float2_", "c64_")
    if fp64:
        text += _COMPLEX.replace("T2", "double2").replace("(T)", "(double)").replace("T ", "double ") \
            .replace("double2_", "c128_")
    out, current, name = [], [], None
    for line in text.strip().splitlines():
        if line and not line.startswith(" ") and line != "}":
            if current:
                out.append((name, "\n".join(current)))
            name, current = line.split("(")[0].split()[-1], [line]
        else:
            current.append(line)
    out.append((name, "\n".join(current)))
    return out


def preamble(fp64: bool, used: str = None) -> str:
    """The program prologue: the fp64 pragma where needed, ``FP_CONTRACT OFF`` and the
    helpers whose names occur in ``used`` (the rest of the program; all when None)."""
    functions = _functions(fp64)
    wanted = set()
    if used is None:
        wanted = {n for n, _ in functions}
    else:
        text = used
        for name, code in reversed(functions):  # a helper may call an earlier one
            if name in text:
                wanted.add(name)
                text += code
    parts = []
    if fp64 and (used is None or "double" in used or any(n.startswith("c128") for n in wanted)):
        parts.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    parts.append("#pragma OPENCL FP_CONTRACT OFF")
    parts += [code for name, code in functions if name in wanted]
    return "\n".join(parts) + "\n"

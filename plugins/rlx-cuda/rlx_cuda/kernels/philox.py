"""Philox4x32-10 on the device: the same u32 stream as ``rlx_core.rng.philox_u32``.

Thread ``t`` computes block ``t`` (counter ``(t_lo, t_hi, 0, 0)``, key ``(seed_lo,
seed_hi)``) and writes its four words' worth of output: four uniforms (element ``i``
uses stream word ``i``) or two normals (element ``i`` uses words ``2i, 2i+1``, Box-Muller
cosine branch). Uniform bits are identical to the CPU's; normals differ by a few ulp
(device ``logf``/``cosf`` round differently from numpy's), as the rng module allows.
Arithmetic uses ``__f*_rn`` intrinsics so that no multiply-add is fused: the
uniform ``low + u * (high - low)`` then rounds exactly as numpy's f32 does.
The seed is a kernel argument, so re-seeding needs no recompile.
"""
from __future__ import annotations

from dataclasses import dataclass

from rlx_core.ir import DType

from ..dtypes import device_type
from .preamble import KERNEL_NAME, PREAMBLE

__all__ = ["PhiloxKernel", "PHILOX_DEVICE"]

PHILOX_DEVICE = r"""
struct rlx_u32x4 { unsigned int x, y, z, w; };
RLX_D rlx_u32x4 rlx_philox(unsigned long long counter, unsigned long long seed) {
  unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0u, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  #pragma unroll
  for (int r = 0; r < 10; ++r) {
    const unsigned long long p0 = (unsigned long long)c0 * 0xD2511F53ull;
    const unsigned long long p1 = (unsigned long long)c2 * 0xCD9E8D57ull;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1; c3 = (unsigned int)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  rlx_u32x4 out; out.x = c0; out.y = c1; out.z = c2; out.w = c3;
  return out;
}
RLX_D float rlx_unit(unsigned int u) { return (float)(u >> 8) * 5.9604644775390625e-08f; }
"""


@dataclass
class PhiloxKernel:
    """``n`` numbers of ``dist`` ("uniform": ``a + u * (b - a)``; "normal": ``a + b * z``),
    computed in f32 and stored as ``dtype`` (the reference's philox rule)."""

    dist: str
    dtype: DType
    n: int
    a: float
    b: float

    @property
    def threads(self) -> int:
        per_block = 4 if self.dist == "uniform" else 2
        return -(-self.n // per_block)

    def source(self) -> str:
        dt = device_type(self.dtype)
        a, b = f"{float(self.a)!r}f", f"{float(self.b)!r}f"
        if self.dist == "uniform":
            values = [f"__fadd_rn({a}, __fmul_rn(rlx_unit(w[{k}]), __fsub_rn({b}, {a})))" for k in range(4)]
        else:
            tiny = "1.17549435e-38f"
            values = [f"__fadd_rn({a}, __fmul_rn({b}, __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(fmaxf(rlx_unit(w[{2 * k}]), "
                      f"{tiny})))), cosf(__fmul_rn(6.2831855f, rlx_unit(w[{2 * k + 1}]))))))" for k in range(2)]
        per = len(values)
        stores = [f"    if (base + {k} < {self.n}ull) out[base + {k}] = {dt.to_store(f'({v})')};"
                  for k, v in enumerate(values)]
        body = [f"  for (unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; "
                f"t < {self.threads}ull; t += (unsigned long long)gridDim.x * blockDim.x) {{",
                "    const rlx_u32x4 q = rlx_philox(t, seed);",
                "    const unsigned int w[4] = {q.x, q.y, q.z, q.w};",
                f"    const unsigned long long base = t * {per}ull;", *stores, "  }"]
        return (PREAMBLE + PHILOX_DEVICE + f'extern "C" __global__ void {KERNEL_NAME}('
                f"{dt.store}* out, unsigned long long seed) {{\n" + "\n".join(body) + "\n}\n")

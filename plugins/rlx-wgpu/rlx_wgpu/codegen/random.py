"""rng_uniform and rng_normal in ``philox`` mode: the Philox4x32-10 stream of
``rlx_core.rng``, bit for bit, computed on the device.

Each invocation computes the 128-bit block that holds its element's u32 word(s):
block ``i / 4`` for uniform element ``i``, block ``i / 2`` (words ``2i % 4`` and the
next) for normal element ``i``. The host writes the node's stream seed (the key) into
its seed region before every run (``rlx_wgpu.steps.RngStep``), so re-seeding needs no
recompile. WGSL has no 32x32->64-bit multiply: ``rlx_mulhilo`` (the 64-bit integer
library's, ``rlx_wgpu.codegen.int64``) builds it from 16-bit halves. The uniform's ``low + u * (high - low)`` must not be fused into one multiply-add
(the reference rounds twice), so the product passes through an OR with a zero the
compiler cannot see (the seed region's third word).
"""
from __future__ import annotations

import numpy as np

from .base import KernelContext, Seeds, generator
from .wgsl import WORKGROUP, f32, grid, linear_id, shader, u32

_PHILOX = """// Philox4x32-10 (Random123's constants) of counter (block, 0, 0, 0) under key k.
fn rlx_philox(block: u32, k: vec2<u32>) -> vec4<u32> {
  var c = vec4<u32>(block, 0u, 0u, 0u);
  var key = k;
  for (var r = 0u; r < 10u; r = r + 1u) {
    let p0 = rlx_mulhilo(c.x, 0xD2511F53u);
    let p1 = rlx_mulhilo(c.z, 0xCD9E8D57u);
    c = vec4<u32>(p1.x ^ c.y ^ key.x, p1.y, p0.x ^ c.w ^ key.y, p0.y);
    key = key + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
  }
  return c;
}
fn rlx_unit(u: u32) -> f32 { return f32(u >> 8u) * 5.9604644775390625e-08f; }
"""


@generator("rng_uniform", "rng_normal")
def rng(k: KernelContext) -> None:
    a, out = k.attrs, k.outs[0]
    if out.size == 0:
        return
    store = "f16(v)" if out.dtype.value == "f16" else "v"
    if k.node.kind == "rng_uniform":
        low, span = np.float32(a["low"]), np.float32(a["high"]) - np.float32(a["low"])
        value = ("let w = rlx_philox(i / 4u, key)[i % 4u];\n"
                 f"  let p = bitcast<f32>(bitcast<u32>(rlx_unit(w) * {f32(span)}) | seeds[2]);\n"
                 f"  let v = {f32(low)} + p;")
    else:
        value = ("let block = rlx_philox(i / 2u, key);\n"
                 "  let u1 = max(rlx_unit(block[(2u * i) % 4u]), 1.17549435e-38f);\n"
                 "  let u2 = rlx_unit(block[(2u * i) % 4u + 1u]);\n"
                 f"  let z = sqrt(-2.0f * log(u1)) * cos({f32(np.float32(2 * np.pi))} * u2);\n"
                 f"  let v = {f32(a['mean'])} + {f32(a['scale'])} * z;")
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(out.size)}) {{ return; }}\n"
            f"  let key = vec2<u32>(seeds[0], seeds[1]);\n  {value}\n  out[i] = {store};")
    k.emit(shader([("seeds", "u32"), ("out", k.storage(out.dtype))], body, decls=_PHILOX),
           [Seeds(k.node.id), k.output()], grid(out.size, WORKGROUP, k.max_grid))

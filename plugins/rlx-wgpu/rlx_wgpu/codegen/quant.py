"""quantize and dequantize (ONNX QuantizeLinear / DequantizeLinear).

i8 and u8 tensors keep numpy's byte layout on the device (four elements per word):
dequantize reads bytes out of words, and quantize packs its results, one invocation per
output word. A rank-0 scale (and zero point) is per tensor, a 1-D one runs along ``axis``.
"""
from __future__ import annotations

from rlx_core.ir import DType

from .base import KernelContext, generator
from .reduce import acc_load, acc_store
from .wgsl import WORKGROUP, grid, linear_id, shader, strides, u32

__all__ = ["QUANT_DTYPES", "read_int"]

QUANT_DTYPES = frozenset({DType.I8, DType.U8, DType.I32})
_RANGE = {DType.I8: (-128, 127), DType.U8: (0, 255)}


def read_int(name: str, dtype: DType, at: str) -> str:
    """Element ``at`` of an integer binding as i32: i32 as is, i8/u8 out of their bytes."""
    if dtype is DType.I32:
        return f"{name}[{at}]"
    byte = f"(({name}[({at}) >> 2u] >> ((({at}) & 3u) * 8u)) & 0xffu)"
    return f"(bitcast<i32>({byte} << 24u) >> 24u)" if dtype is DType.I8 else f"i32({byte})"


def _param_index(k: KernelContext, x_dims, at: str) -> str:
    """Index into a scale / zero point for element ``at``: 0, or its coordinate along ``axis``."""
    if k.ins[1].rank == 0:
        return "0u"
    axis = k.attrs["axis"]
    return f"(({at}) / {u32(strides(x_dims)[axis])}) % {u32(x_dims[axis])}"


def _binding(k: KernelContext, i: int) -> tuple[str, str]:
    """(name, element type) of input ``i``; byte-sized integers are bound as raw words."""
    names = ("x", "scale", "zp")
    dtype = k.ins[i].dtype
    return names[i], "u32" if dtype in _RANGE else k.storage(dtype)


@generator("dequantize")
def dequantize(k: KernelContext) -> None:
    q, scale, out = k.ins[0], k.ins[1], k.outs[0]
    if out.size == 0:
        return
    p = _param_index(k, q.dims, "i")
    zp = read_int("zp", q.dtype, p) if len(k.ins) == 3 else "0i"
    y = f"select(f32(m), -f32(m), a < z) * {acc_load(scale.dtype, f'scale[{p}]')}"
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(out.size)}) {{ return; }}\n"
            f"  let a = {read_int('x', q.dtype, 'i')};\n  let z = {zp};\n"
            "  // |a - z| < 2**32 always fits a u32, although a - z may overflow an i32\n"
            "  let m = select(bitcast<u32>(a) - bitcast<u32>(z), bitcast<u32>(z) - bitcast<u32>(a), a < z);\n"
            f"  out[i] = {acc_store(out.dtype, y)};")
    bindings = [_binding(k, i) for i in range(len(k.ins))] + [("out", k.storage(out.dtype))]
    k.emit(shader(bindings, body), [k.input(i) for i in range(len(k.ins))] + [k.output()],
           grid(out.size, WORKGROUP, k.max_grid))


@generator("quantize")
def quantize(k: KernelContext) -> None:
    """One invocation per output word: four elements, each round(x / scale) + zero point
    clamped to the output range, packed little-endian."""
    x, out = k.ins[0], k.outs[0]
    words = -(-out.size // 4)
    if words == 0:
        return
    lo, hi = _RANGE[out.dtype]
    p = _param_index(k, x.dims, "e")
    zero = f" + f32({read_int('zp', out.dtype, p)})" if len(k.ins) == 3 else ""
    q = f"clamp(round({acc_load(x.dtype, 'x[e]')} / {acc_load(x.dtype, f'scale[{p}]')}){zero}, {lo}.0f, {hi}.0f)"
    body = (f"  let w = {linear_id()};\n  if (w >= {u32(words)}) {{ return; }}\n  var packed = 0u;\n"
            f"  for (var j = 0u; j < 4u; j = j + 1u) {{\n    let e = w * 4u + j;\n"
            f"    if (e < {u32(out.size)}) {{ packed = packed | ((bitcast<u32>(i32({q})) & 0xffu) << (j * 8u)); }}\n"
            "  }\n  out[w] = packed;")
    bindings = [_binding(k, i) for i in range(len(k.ins))] + [("out", "u32")]
    k.emit(shader(bindings, body), [k.input(i) for i in range(len(k.ins))] + [k.output()],
           grid(words, WORKGROUP, k.max_grid))

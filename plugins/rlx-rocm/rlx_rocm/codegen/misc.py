"""Quantization, random numbers and Fourier transforms.

* ``quantize``/``dequantize``: one work-item per element, the scale (and zero point)
  looked up along ``axis``; rounding half to even (``rint``), saturation by clamping.
* ``rng_uniform``/``rng_normal``: Philox4x32-10 on the device, element ``e`` of the
  node's stream from ``philox_u32(e, key)`` -- bit for bit ``rlx_core.rng`` (uniform in
  f32 exactly; normals through this device's ``log``/``cos``). The key is a pair of
  kernel arguments the run sets from its rng options (``rlx_rocm.steps.RngStep``).
* ``fft``/``rfft``/``irfft``: a direct DFT per output element accumulated in double
  precision, as the reference computes (so claimed only with ``cl_khr_fp64``), twiddles
  from ``sinpi``/``cospi`` of the exactly reduced angle ``2 (j k mod n) / n``.
"""
from __future__ import annotations

import math

from rlx_core.ir import DType, Ref

from .base import KernelContext, SeedArg, groups, idx_type, linear_loop, strides_of
from .types import ctype, literal, load, round_to, store

__all__ = ["GENERATORS"]


def _axis_index(x_dims, axis: int, var: str = "e") -> str:
    """The coordinate along ``axis`` of row-major linear index ``var``."""
    inner = math.prod(x_dims[axis + 1:])
    e = var if inner == 1 else f"({var} / {inner})"
    return e if axis == 0 else f"({e} % {x_dims[axis]})"


def quantize(k: KernelContext) -> None:
    node = k.node
    x, scale = k.inputs[0], k.inputs[1]
    out = k.out
    dt, to = x.dtype, out.dtype
    n = out.size
    if n == 0:
        return
    t = ctype(dt)
    zp = len(node.inputs) > 2
    at = "0" if scale.rank == 0 else _axis_index(x.dims, node.attrs["axis"])
    params = [(k.buf("x", dt, True), node.inputs[0]), (k.buf("s", dt, True), node.inputs[1])]
    if zp:
        params.append((k.buf("zp", to, True), node.inputs[2]))
    params.append((k.buf("out", to), Ref(node.id)))
    lo, hi = (-128, 127) if to is DType.I8 else (0, 255)
    zero = f" + ({t})zp[{at}]" if zp else ""
    idx = idx_type(n)
    div = f"{load(dt, 'x', 'e')} / {load(dt, 's', at)}"  # 16-bit floats: in f32, unrounded
    body = (f"    const {t} q = rint({div}){zero};\n"
            f"    out[e] = ({ctype(to)})(q < ({t}){lo} ? ({t}){lo} : (q > ({t}){hi} ? ({t}){hi} : q));")
    k.kernel(params, linear_loop("e", n, idx, body), groups(n, k.wg, k.max_groups()), k.wg)


def dequantize(k: KernelContext) -> None:
    node = k.node
    q, scale = k.inputs[0], k.inputs[1]
    out = k.out
    dt = out.dtype
    n = out.size
    if n == 0:
        return
    zp = len(node.inputs) > 2
    at = "0" if scale.rank == 0 else _axis_index(q.dims, node.attrs["axis"])
    params = [(k.buf("q", q.dtype, True), node.inputs[0]), (k.buf("s", dt, True), node.inputs[1])]
    if zp:
        params.append((k.buf("zp", q.dtype, True), node.inputs[2]))
    params.append((k.buf("out", dt), Ref(node.id)))
    diff = f"((long)q[e] - (long)zp[{at}])" if zp else "(long)q[e]"
    t = ctype(dt)
    conv = f"(({t}){diff})"
    value = f"{conv} * {load(dt, 's', at)}"
    idx = idx_type(n)
    k.kernel(params, linear_loop("e", n, idx, f"    {store(dt, 'out', 'e', value)}"),
             groups(n, k.wg, k.max_groups()), k.wg)


def rng(k: KernelContext) -> None:
    node = k.node
    a = node.attrs
    out = k.out
    dt = out.dtype
    n = out.size
    if n == 0:
        return
    params = [("uint key0", SeedArg(node.id, 0)), ("uint key1", SeedArg(node.id, 1)),
              (k.buf("out", dt), Ref(node.id))]
    unit = "((float)(philox_u32({}, key) >> 8) * 5.9604644775390625e-8f)"
    if node.kind == "rng_uniform":
        lo, hi = literal(DType.F32, a["low"]), literal(DType.F32, a["high"])
        value = f"({lo} + {unit.format('(ulong)e')} * ({hi} - {lo}))"
    else:
        mean, scale = literal(DType.F32, a["mean"]), literal(DType.F32, a["scale"])
        value = (f"({mean} + {scale} * (sqrt(-2.0f * log(fmax({unit.format('2 * (ulong)e')}, FLT_MIN))) * "
                 f"cos(6.2831854820251465f * {unit.format('2 * (ulong)e + 1')})))")
    body = (f"    const uint2 key = (uint2)(key0, key1);\n"
            f"    const float v = {value};\n"
            f"    {store(dt, 'out', 'e', _from_f32(dt, 'v'))}")
    idx = idx_type(2 * n + 2)
    k.kernel(params, linear_loop("e", n, idx, body), groups(n, k.wg, k.max_groups()), k.wg)


def _from_f32(dt: DType, v: str) -> str:
    if dt is DType.F64:
        return f"(double)({v})"
    return round_to(dt, v)


def _norm_factor(norm: str, n: int, inverse: bool) -> float:
    if norm == "ortho":
        return 1.0 / math.sqrt(n) if n else 1.0
    scaled = (norm == "backward") == inverse  # backward scales the inverse, forward the forward transform
    return 1.0 / n if scaled and n else 1.0


def _fft_common(k: KernelContext, axis: int, in_len: int, out_len: int):
    x, out = k.inputs[0], k.out
    inner = math.prod(out.dims[axis + 1:])
    outer = math.prod(out.dims[:axis])
    return x, out, outer, inner


def _dft(dt: DType, n: int, m: int, inner: int, length: int, used: int, sign: float, f: float,
         value: str, accumulate: str) -> str:
    """The loop body of a direct DFT, one work-item per output ``e`` of complex ``dt``: its
    frequency ``kq`` (of ``m`` along the axis) sums ``used`` inputs ``j`` at ``x[base + j*inner]``
    (``value`` declares ``v``, ``accumulate`` adds it times ``c + i*s`` into ``re``/``im``) with
    angle ``sign * 2*pi*j*kq/n``; the sum is scaled by ``f``."""
    real = "float" if dt is DType.C64 else "double"
    return (f"    const long kq = (e / {inner}) % {m}, o = e / {m * inner}, in_ = e % {inner};\n"
            f"    const long base = o * {length * inner} + in_;\n"
            f"    double re = 0, im = 0;\n"
            f"    for (long j = 0; j < {used}; j++) {{\n"
            f"      const double ang = {2.0 * sign!r} * (double)((j * kq) % {n}) / {float(n)!r};\n"
            f"      const double s = sinpi(ang), c = cospi(ang);\n"
            f"      {value}\n"
            f"      {accumulate}\n"
            f"    }}\n"
            f"    out[e] = ({ctype(dt)})(({real})(re * {f!r}), ({real})(im * {f!r}));")


def fft(k: KernelContext) -> None:
    a = k.node.attrs
    x, out = k.inputs[0], k.out
    axis, n = a["axis"], out.dims[a["axis"]]
    total = out.size
    if total == 0:
        return
    length = x.dims[axis]
    inner = math.prod(out.dims[axis + 1:])
    used = min(length, n)
    sign = 1.0 if a["inverse"] else -1.0
    f = _norm_factor(a["norm"], n, a["inverse"])
    dt = out.dtype
    params = [(k.buf("x", x.dtype, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    body = _dft(dt, n, n, inner, length, used, sign, f, f"const {ctype(x.dtype)} v = x[base + j * {inner}];",
                "re += (double)v.x * c - (double)v.y * s; im += (double)v.x * s + (double)v.y * c;")
    k.kernel(params, linear_loop("e", total, "long", body), groups(total, k.wg, k.max_groups()), k.wg)


def rfft(k: KernelContext) -> None:
    a = k.node.attrs
    x, out = k.inputs[0], k.out
    axis, n = a["axis"], a["n"] if a["n"] is not None else x.dims[a["axis"]]
    total = out.size
    if total == 0:
        return
    m = out.dims[axis]
    length = x.dims[axis]
    inner = math.prod(out.dims[axis + 1:])
    used = min(length, n)
    f = _norm_factor(a["norm"], n, False)
    dt = out.dtype
    params = [(k.buf("x", x.dtype, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    body = _dft(dt, n, m, inner, length, used, -1.0, f,
                f"const double v = (double){load(x.dtype, 'x', f'base + j * {inner}')};", "re += v * c; im += v * s;")
    k.kernel(params, linear_loop("e", total, "long", body), groups(total, k.wg, k.max_groups()), k.wg)


def irfft(k: KernelContext) -> None:
    a = k.node.attrs
    x, out = k.inputs[0], k.out
    axis = a["axis"]
    n = out.dims[axis]
    total = out.size
    if total == 0:
        return
    length = x.dims[axis]
    inner = math.prod(out.dims[axis + 1:])
    m = min(length, n // 2 + 1)  # coefficients used: the rest of the Hermitian spectrum mirrors them
    f = _norm_factor(a["norm"], n, True)
    dt = out.dtype
    nyquist = n % 2 == 0 and n // 2 < length
    last = (n - 1) // 2  # coefficients 1..last count twice
    params = [(k.buf("x", x.dtype, True), k.node.inputs[0]), (k.buf("out", dt), Ref(k.node.id))]
    body = (f"    const long tq = (e / {inner}) % {n}, o = e / {n * inner}, in_ = e % {inner};\n"
            f"    const long base = o * {length * inner} + in_;\n"
            f"    double acc = (double)x[base].x;\n"
            f"    for (long j = 1; j < {min(m, last + 1)}; j++) {{\n"
            f"      const double ang = 2.0 * (double)((j * tq) % {n}) / {float(n)!r};\n"
            f"      const double s = sinpi(ang), c = cospi(ang);\n"
            f"      const {ctype(x.dtype)} v = x[base + j * {inner}];\n"
            f"      acc += 2.0 * ((double)v.x * c - (double)v.y * s);\n"
            f"    }}\n"
            + (f"    acc += (double)x[base + {n // 2} * {inner}].x * ((tq % 2) ? -1.0 : 1.0);\n" if nyquist else "")
            + f"    out[e] = ({ctype(dt)})(acc * {f!r});")
    k.kernel(params, linear_loop("e", total, "long", body), groups(total, k.wg, k.max_groups()), k.wg)


GENERATORS = {"quantize": quantize, "dequantize": dequantize, "rng_uniform": rng, "rng_normal": rng,
              "fft": fft, "rfft": rfft, "irfft": irfft}

"""fft, rfft and irfft along one axis, in f32 (c64).

Lengths that are powers of two use the iterative radix-2 (decimation in time) FFT:
bit-reversed load, log2(n) butterfly stages, scaled store -- in workgroup memory, one
workgroup per transform, when ``n`` complex values fit there, else one dispatch per
stage over a scratch copy in global memory. Other lengths are computed as a direct DFT
(one invocation per output bin, ``n`` terms each, twiddle index ``j*k mod n`` so the
angles stay exact); ``check_node`` refuses those above :data:`MAX_DIRECT` (quadratic
work). Twiddles are computed on the host in f64 and rounded to f32.

Each kind is a loader (element ``j`` of the length-``n`` complex sequence: cropped or
zero-padded input; for irfft the Hermitian extension of the half spectrum) and a
writer (every bin of fft, the first ``n//2 + 1`` of rfft, the real part for irfft).
"""
from __future__ import annotations

import math

import numpy as np


from .base import KernelContext, generator
from .reduce import acc_load, acc_store, rows
from .wgsl import WORKGROUP, f32, grid, linear_id, row_id, shader, strides, u32

__all__ = ["MAX_DIRECT", "is_power_of_two"]

MAX_DIRECT = 16384  # longest non-power-of-two transform (n*n work per transform)


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class _Transform:
    """One fft-family node: loader, writer, direction and scale."""

    def __init__(self, k: KernelContext):
        a, x, out = k.attrs, k.ins[0], k.outs[0]
        self.n, self.axis, self.kind = a["n"], a["axis"], k.node.kind
        self.inverse = a.get("inverse", False) or self.kind == "irfft"
        self.count, _, in_base, _ = rows(x.dims, (self.axis,))
        self.out_base = rows(out.dims, (self.axis,))[2]
        self.in_base, self.in_len = in_base, x.dims[self.axis]
        self.in_step, self.out_step = strides(x.dims)[self.axis], strides(out.dims)[self.axis]
        self.out_len, self.in_dtype, self.out_dtype = out.dims[self.axis], x.dtype, out.dtype
        scale = {"backward": 1.0 / self.n if self.inverse else 1.0, "forward": 1.0 if self.inverse else 1.0 / self.n,
                 "ortho": 1.0 / math.sqrt(self.n)}[a["norm"]]
        self.scale = f32(scale)

    def load(self, j: str) -> str:
        """WGSL: element ``j`` (< n) of the sequence to transform, as vec2<f32>."""
        at = f"x[ib + ({j}) * {u32(self.in_step)}]"
        if self.kind == "rfft":
            return f"select(vec2<f32>(), vec2<f32>({acc_load(self.in_dtype, at)}, 0.0f), ({j}) < {u32(self.in_len)})"
        if self.kind == "fft":
            return f"select(vec2<f32>(), {at}, ({j}) < {u32(self.in_len)})"
        return f"rlx_hermitian(ib, {j})"

    def helper(self) -> str:
        """irfft's Hermitian extension of the half spectrum (used bins: n//2 + 1)."""
        if self.kind != "irfft":
            return ""
        n, m = self.n, min(self.in_len, self.n // 2 + 1)
        nyquist = f" || k == {u32(n // 2)}" if n % 2 == 0 else ""
        return (f"fn rlx_hermitian(ib: u32, k: u32) -> vec2<f32> {{\n"
                f"  let mirror = k > {u32(n // 2)};\n  let src = select(k, {u32(n)} - k, mirror);\n"
                f"  var v = select(vec2<f32>(), x[ib + src * {u32(self.in_step)}], src < {u32(m)});\n"
                f"  if (mirror) {{ v.y = -v.y; }}\n  if (k == 0u{nyquist}) {{ v.y = 0.0f; }}\n  return v;\n}}\n")

    def store(self, k: str, value: str) -> str:
        """WGSL: write bin ``k`` (scaled) if the output keeps it."""
        at = f"out[ob + ({k}) * {u32(self.out_step)}]"
        scaled = f"({value}) * {self.scale}"
        real = self.kind == "irfft"
        stored = f"{at} = {acc_store(self.out_dtype, f'({scaled}).x')};" if real else f"{at} = {scaled};"
        if self.out_len == self.n:
            return stored
        return f"if (({k}) < {u32(self.out_len)}) {{ {stored} }}"

    def twiddles(self, k: KernelContext, count: int):
        """Data region of exp(-2 pi i m / n), m < count, as c64."""
        return k.data(np.exp(-2j * np.pi * np.arange(count) / self.n).astype(np.complex64))

    def conj(self, w: str) -> str:
        return f"vec2<f32>({w}.x, -{w}.y)" if self.inverse else w


def _bindings(k: KernelContext, t: _Transform, extra=()) -> list:
    return [("x", k.storage(t.in_dtype))] + list(extra) + [("out", k.storage(t.out_dtype))]


@generator("fft", "rfft", "irfft")
def fft(k: KernelContext) -> None:
    t = _Transform(k)
    if t.count == 0:
        return
    if not is_power_of_two(t.n):
        return _direct(k, t)
    if 8 * t.n <= k.gpu.workgroup_bytes:
        return _radix2_shared(k, t)
    return _radix2_global(k, t)


def _row_lines(t: _Transform) -> list[str]:
    return [f"let ib = {t.in_base};", f"let ob = {t.out_base};"]


def _rev(t: _Transform, j: str) -> str:
    bits = t.n.bit_length() - 1
    return f"(reverseBits({j}) >> {u32(32 - bits)})" if bits else j


def _butterfly(t: _Transform, buf: str, base: str, half: int) -> str:
    """WGSL of butterfly ``q`` of the stage whose half-span is ``half``, on ``buf``."""
    return (f"let pos = q % {u32(half)}; let i0 = {base}(q / {u32(half)}) * {u32(2 * half)} + pos; "
            f"let i1 = i0 + {u32(half)}; let w = tw[pos * {u32(t.n // (2 * half))}]; "
            f"let a = {buf}[i0]; let b = rlx_cmul({buf}[i1], {t.conj('w')}); {buf}[i0] = a + b; {buf}[i1] = a - b;")


def _radix2_shared(k: KernelContext, t: _Transform) -> None:
    wg = min(WORKGROUP, max(1, t.n // 2))
    load = f"buf[{_rev(t, 'j')}] = {t.load('j')};"
    lines = _row_lines(t) + [f"for (var j = lid; j < {u32(t.n)}; j = j + {u32(wg)}) {{ {load} }}",
                             "workgroupBarrier();"]
    half = 1
    while half < t.n:
        lines += [f"for (var q = lid; q < {u32(t.n // 2)}; q = q + {u32(wg)}) {{ {_butterfly(t, 'buf', '', half)} }}",
                  "workgroupBarrier();"]
        half *= 2
    lines.append(f"for (var j = lid; j < {u32(t.n)}; j = j + {u32(wg)}) {{ {t.store('j', 'buf[j]')} }}")
    body = f"  let row = {row_id()};\n  if (row >= {u32(t.count)}) {{ return; }}\n" + "".join(f"  {s}\n" for s in lines)
    decls = t.helper() + f"var<workgroup> buf: array<vec2<f32>, {t.n}>;\n"
    k.emit(shader(_bindings(k, t, [("tw", "vec2<f32>")]), body, wg, decls),
           [k.input(0), t.twiddles(k, max(1, t.n // 2)), k.output()], grid(t.count, 1, k.max_grid))


def _radix2_global(k: KernelContext, t: _Transform) -> None:
    """Bit-reversed copy into scratch, one dispatch per stage in place, scaled store."""
    work = k.scratch(8 * t.count * t.n)
    tw = t.twiddles(k, t.n // 2)
    total, pairs = t.count * t.n, t.count * (t.n // 2)
    head = f"  let i = {linear_id()};\n"
    load = (head + f"  if (i >= {u32(total)}) {{ return; }}\n  let row = i / {u32(t.n)};\n  let j = i % {u32(t.n)};\n"
            f"  let ib = {t.in_base};\n  buf[row * {u32(t.n)} + {_rev(t, 'j')}] = {t.load('j')};")
    k.emit(shader([("x", k.storage(t.in_dtype)), ("buf", "vec2<f32>")], load, decls=t.helper()),
           [k.input(0), work], grid(total, WORKGROUP, k.max_grid))
    half = 1
    while half < t.n:
        stage = (head + f"  if (i >= {u32(pairs)}) {{ return; }}\n  let row = i / {u32(t.n // 2)};\n"
                 f"  let q = i % {u32(t.n // 2)};\n  {_butterfly(t, 'buf', f'row * {u32(t.n)} + ', half)}")
        k.emit(shader([("buf", "vec2<f32>"), ("tw", "vec2<f32>")], stage), [work, tw],
               grid(pairs, WORKGROUP, k.max_grid))
        half *= 2
    store = (head + f"  if (i >= {u32(total)}) {{ return; }}\n  let row = i / {u32(t.n)};\n  let j = i % {u32(t.n)};\n"
             f"  let ob = {t.out_base};\n  {t.store('j', f'buf[row * {u32(t.n)} + j]')}")
    k.emit(shader([("buf", "vec2<f32>"), ("out", k.storage(t.out_dtype))], store), [work, k.output()],
           grid(total, WORKGROUP, k.max_grid))


def _direct(k: KernelContext, t: _Transform) -> None:
    """X_k = sum_j x_j w^(jk mod n): one invocation per kept output bin."""
    total = t.count * t.out_len
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(total)}) {{ return; }}\n"
            f"  let row = i / {u32(t.out_len)};\n  let kb = i % {u32(t.out_len)};\n"
            + "".join(f"  {s}\n" for s in _row_lines(t))
            + f"  var acc = vec2<f32>();\n  var m = 0u;\n"
            f"  for (var j = 0u; j < {u32(t.n)}; j = j + 1u) {{\n"
            f"    acc = acc + rlx_cmul({t.load('j')}, {t.conj('tw[m]')});\n"
            f"    m = m + kb;\n    if (m >= {u32(t.n)}) {{ m = m - {u32(t.n)}; }}\n  }}\n"
            f"  {t.store('kb', 'acc')}")
    k.emit(shader(_bindings(k, t, [("tw", "vec2<f32>")]), body, decls=t.helper()),
           [k.input(0), t.twiddles(k, t.n), k.output()], grid(total, WORKGROUP, k.max_grid))

"""Index-driven kernels: gather, gather_elements, scatter_add, pad (every mode), pool2d,
im2col (the gather side of convolution), col2im (transposed convolution), rope.

All run one thread per output element in a grid-stride loop, except scatter_add,
which runs one thread per (outer, inner) column and walks the indices in order, so
repeated indices accumulate in order and the result is deterministic (no atomics).
Indices outside ``[-n, n)`` follow the index ops' device mode (``rlx_core.ir.ops.movement``):
wrapped once, then clamped into ``[0, n - 1]`` (``rlx_wrap``), for the gathers and
scatter_add alike, so that a bad index never becomes an out-of-bounds memory access.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlx_core.ir import DType

from ..dtypes import device_type, index_ctype
from .elementwise import contiguous_strides
from .preamble import KERNEL_NAME, PREAMBLE

__all__ = ["GatherKernel", "GatherElementsKernel", "ScatterAddKernel", "PadKernel", "Pool2dKernel",
           "Im2colKernel", "Col2imKernel", "RopeKernel"]


def _loop(n: int, idx: str) -> str:
    return (f"  for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u; "
            f"i += ({idx})gridDim.x * blockDim.x) {{")


def _types(n: int):
    return ("unsigned int" if n < 2**31 else "unsigned long long"), index_ctype(n)


def _wrap(index: str, n: int) -> str:
    """A possibly negative index into an axis of size ``n``: wrapped, then clamped."""
    return f"rlx_wrap((long long)({index}), {n}LL)"


_WRAP = ("RLX_D long long rlx_wrap(long long i, long long n) {\n"
         "  if (i < 0) i += n;\n  return i < 0 ? 0 : (i >= n ? n - 1 : i);\n}\n")


def _kernel(params: str, body: list[str], head: str = "") -> str:
    return (PREAMBLE + _WRAP + head + f'extern "C" __global__ void {KERNEL_NAME}({params}) {{\n'
            + "\n".join(body) + "\n}\n")


@dataclass
class GatherKernel:
    """``out[p, j, q] = table[p, idx[j], q]`` for a table viewed as ``[outer, n, inner]``."""

    dtype: DType
    index_dtype: DType
    outer: int
    n: int
    inner: int
    count: int

    def source(self) -> str:
        st = device_type(self.dtype).store
        total = self.outer * self.count * self.inner
        idx, off = _types(max(total, self.outer * self.n * self.inner))
        body = [_loop(total, idx),
                f"    const {idx} q = i % {max(self.inner, 1)}u, j = (i / {max(self.inner, 1)}u) % {max(self.count, 1)}u;",
                f"    const {idx} p = i / {max(self.inner * self.count, 1)}u;",
                f"    const {off} src = (({off})p * {self.n} + ({off}){_wrap('idx[j]', self.n)}) * {self.inner} + q;",
                "    out[i] = table[src];", "  }"]
        return _kernel(f"const {st}* table, const {device_type(self.index_dtype).store}* idx, {st}* out", body)


@dataclass
class GatherElementsKernel:
    """``out[pos] = x[pos with pos[axis] = idx[pos]]``; ``out``/``idx`` have ``dims``."""

    dtype: DType
    index_dtype: DType
    x_dims: tuple[int, ...]
    dims: tuple[int, ...]
    axis: int

    def source(self) -> str:
        st = device_type(self.dtype).store
        total = math.prod(self.dims)
        idx, off = _types(max(total, math.prod(self.x_dims)))
        xs = contiguous_strides(self.x_dims)
        lines = [_loop(total, idx), f"    {idx} rem = i;", f"    {off} src = 0;"]
        for d in range(len(self.dims) - 1, -1, -1):
            lines.append(f"    {{ const {idx} c = rem % {self.dims[d]}u; rem /= {self.dims[d]}u;")
            coord = _wrap("idx[i]", self.x_dims[d]) if d == self.axis else "c"
            lines.append(f"      src += ({off})({coord}) * {xs[d]}; }}")
        lines += ["    out[i] = x[src];", "  }"]
        return _kernel(f"const {st}* x, const {device_type(self.index_dtype).store}* idx, {st}* out", lines)


@dataclass
class ScatterAddKernel:
    """``out[p, idx[i], q] += upd[p, i, q]`` for i in order; ``out`` already holds ``data``.
    One thread per (p, q); bool adds with logical or, integers wrap, f16/bf16 round after
    each addition."""

    dtype: DType
    index_dtype: DType
    outer: int
    n: int
    inner: int
    count: int

    def source(self) -> str:
        dt = device_type(self.dtype)
        cols = self.outer * self.inner
        idx, off = _types(max(self.outer * self.n * self.inner, self.outer * self.count * self.inner, 1))
        add = "(cur || u)" if self.dtype.is_bool else "rlx_add(cur, u)"
        body = [_loop(cols, idx),
                f"    const {idx} p = i / {max(self.inner, 1)}u, q = i % {max(self.inner, 1)}u;",
                f"    for ({idx} k = 0; k < {self.count}u; ++k) {{",
                f"      const {off} dst = (({off})p * {self.n} + ({off}){_wrap('idx[k]', self.n)}) * {self.inner} + q;",
                f"      const {dt.compute} cur = {dt.load_from('out[dst]')};",
                f"      const {dt.compute} u = {dt.load_from(f'upd[(({off})p * {self.count} + k) * {self.inner} + q]')};",
                f"      out[dst] = {dt.to_store(add)};", "    }", "  }"]
        return _kernel(f"const {dt.store}* upd, const {device_type(self.index_dtype).store}* idx, {dt.store}* out",
                       body)


@dataclass
class PadKernel:
    """``pad`` in every mode: output coordinate c along axis d reads input ``c - before[d]``;
    outside the input, ``constant`` writes ``value``, ``edge`` clamps, ``reflect`` mirrors."""

    dtype: DType
    in_dims: tuple[int, ...]
    out_dims: tuple[int, ...]
    before: tuple[int, ...]
    mode: str
    value_expr: str  # C expression of the fill value in the compute type (constant mode)

    def source(self) -> str:
        dt = device_type(self.dtype)
        total = math.prod(self.out_dims)
        idx, off = _types(max(total, math.prod(self.in_dims)))
        xs = contiguous_strides(self.in_dims)
        lines = [_loop(total, idx), f"    {idx} rem = i;", f"    {off} src = 0;", "    bool inside = true;"]
        for d in range(len(self.out_dims) - 1, -1, -1):
            n = self.in_dims[d]
            lines.append(f"    {{ long long c = (long long)(rem % {self.out_dims[d]}u) - {self.before[d]}; "
                         f"rem /= {self.out_dims[d]}u;")
            if self.mode == "edge":
                lines.append(f"      c = c < 0 ? 0 : (c >= {n} ? {n - 1} : c);")
            elif self.mode == "reflect":
                lines.append(f"      if (c < 0) c = -c; if (c >= {n}) c = {2 * (n - 1)} - c;")
            else:
                lines.append(f"      if (c < 0 || c >= {n}) {{ inside = false; c = 0; }}")
            lines.append(f"      src += ({off})c * {xs[d]}; }}")
        lines.append(f"    out[i] = inside ? x[src] : {dt.to_store(self.value_expr)};")
        lines.append("    (void)inside;")
        lines.append("  }")
        return _kernel(f"const {dt.store}* x, {dt.store}* out", lines)


@dataclass
class Pool2dKernel:
    """max / avg pooling of ``[N, C, H, W]`` to ``[N, C, OH, OW]`` (see the ``pool2d`` op)."""

    dtype: DType
    mode: str
    in_dims: tuple[int, int, int, int]
    out_hw: tuple[int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilations: tuple[int, int]
    count_include_pad: bool

    def source(self) -> str:
        dt = device_type(self.dtype)
        acc = "double" if self.dtype is DType.F64 else "float"
        inf = "rlx_inf_d()" if acc == "double" else "rlx_inf_f()"
        n, c, h, w = self.in_dims
        oh, ow = self.out_hw
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        pt, pl, pb, pr = self.pads
        total = n * c * oh * ow
        idx, off = _types(max(total, n * c * h * w))
        if self.mode == "max":
            init, update, final = f"-{inf}", "acc = rlx_max(acc, v);", "acc"
        else:
            init, update, final = "0", "acc += v;", f"acc / ({acc})count"
        if self.count_include_pad:
            counted = f"(yy < {h + pt + pb} && xx < {w + pl + pr})"
        else:
            counted = "inside"
        body = [_loop(total, idx),
                f"    const {idx} ox = i % {ow}u, oy = (i / {ow}u) % {oh}u, nc = i / {oh * ow}u;",
                f"    const {off} base = ({off})nc * {h * w};",
                f"    {acc} acc = {init}; int count = 0;",
                f"    for (int ky = 0; ky < {kh}; ++ky) for (int kx = 0; kx < {kw}; ++kx) {{",
                f"      const int yy = (int)oy * {sh} + ky * {dh}, xx = (int)ox * {sw} + kx * {dw};",
                f"      const int iy = yy - {pt}, ix = xx - {pl};",
                f"      const bool inside = iy >= 0 && iy < {h} && ix >= 0 && ix < {w};",
                f"      if ({counted}) ++count;",
                "      if (!inside) continue;",
                f"      const {acc} v = ({acc}){dt.load_from('x[base + iy * ' + str(w) + ' + ix]')};",
                f"      {update}", "    }", "    (void)count;",
                f"    out[i] = {dt.to_store(final)};", "  }"]
        return _kernel(f"const {dt.store}* x, {dt.store}* out", body)


@dataclass
class Im2colKernel:
    """Convolution's gather: ``cols[n, c*kh*kw + t, oy*OW + ox] = x_padded[n, c, oy*s + ty*d, ...]``
    (zero outside the input), so that conv is one GEMM per sample and group.
    1-D convolutions use ``H = kh = 1``."""

    dtype: DType
    in_dims: tuple[int, int, int, int]
    out_hw: tuple[int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int]  # begin paddings (top, left)
    dilations: tuple[int, int]

    def source(self) -> str:
        dt = device_type(self.dtype)
        n, c, h, w = self.in_dims
        oh, ow = self.out_hw
        kh, kw = self.kernel
        total = n * c * kh * kw * oh * ow
        idx, off = _types(max(total, n * c * h * w))
        body = [_loop(total, idx),
                f"    const {idx} ox = i % {ow}u, oy = (i / {ow}u) % {oh}u;",
                f"    const {idx} kx = (i / {oh * ow}u) % {kw}u, ky = (i / {oh * ow * kw}u) % {kh}u;",
                f"    const {idx} nc = i / {oh * ow * kw * kh}u;",
                f"    const int iy = (int)oy * {self.strides[0]} + (int)ky * {self.dilations[0]} - {self.pads[0]};",
                f"    const int ix = (int)ox * {self.strides[1]} + (int)kx * {self.dilations[1]} - {self.pads[1]};",
                f"    const bool inside = iy >= 0 && iy < {h} && ix >= 0 && ix < {w};",
                f"    cols[i] = inside ? x[({off})nc * {h * w} + iy * {w} + ix] : ({dt.store})0;", "  }"]
        return _kernel(f"const {dt.store}* x, {dt.store}* cols", body)


@dataclass
class Col2imKernel:
    """Transposed convolution's gather: ``out[n, g*cpg + o, y, x] = bias[...] + sum over taps
    of cols[n, g, o*kh*kw + t, iy*W + ix]`` where ``y + pad_top = iy*s + ty*d`` (same for x).
    ``cols`` holds, per sample and group, ``w_g^T @ x_g`` in f32 (f64 for f64), and the
    taps accumulate in that type, so the result is rounded once."""

    dtype: DType
    batch: int
    groups: int
    co_per_group: int
    in_hw: tuple[int, int]
    out_hw: tuple[int, int]
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int]
    dilations: tuple[int, int]
    has_bias: bool

    def source(self) -> str:
        dt = device_type(self.dtype)
        acc = "double" if self.dtype is DType.F64 else "float"
        (h, w), (oh, ow), (kh, kw) = self.in_hw, self.out_hw, self.kernel
        (sy, sx), (py, px), (dy, dx) = self.strides, self.pads, self.dilations
        co = self.groups * self.co_per_group
        total = self.batch * co * oh * ow
        cols_per_sample = co * kh * kw * h * w
        idx, off = _types(max(total, self.batch * cols_per_sample))
        bias = f"({acc}){dt.load_from('bias[o]')}" if self.has_bias else f"({acc})0"
        body = [_loop(total, idx),
                f"    const {idx} x = i % {ow}u, y = (i / {ow}u) % {oh}u, o = (i / {oh * ow}u) % {co}u;",
                f"    const {idx} n = i / {co * oh * ow}u;",
                f"    {acc} acc = {bias};",
                f"    for (int ty = 0; ty < {kh}; ++ty) {{",
                f"      const int ny = (int)y + {py} - ty * {dy};",
                f"      if (ny < 0 || ny % {sy} != 0 || ny / {sy} >= {h}) continue;",
                f"      for (int tx = 0; tx < {kw}; ++tx) {{",
                f"        const int nx = (int)x + {px} - tx * {dx};",
                f"        if (nx < 0 || nx % {sx} != 0 || nx / {sx} >= {w}) continue;",
                f"        const {off} row = ({off})o * {kh * kw} + ty * {kw} + tx;",
                f"        acc += cols[({off})n * {cols_per_sample} + row * {h * w} + (ny / {sy}) * {w} + nx / {sx}];",
                "      }", "    }",
                f"    out[i] = {dt.to_store('acc')};", "  }"]
        return _kernel(f"const {acc}* cols, const {dt.store}* bias, {dt.store}* out", body)


@dataclass
class RopeKernel:
    """Rotary embedding on ``[..., S, D]``: see the ``rope`` op (tables ``[S, n_rot/2]``)."""

    dtype: DType
    dims: tuple[int, ...]
    n_rot: int
    style: str

    def source(self) -> str:
        dt = device_type(self.dtype)
        acc = "double" if self.dtype is DType.F64 else "float"
        s, d = self.dims[-2:]
        total = math.prod(self.dims)
        idx, off = _types(total)
        half = self.n_rot // 2
        if self.style == "half":
            pair = [f"      const bool first = f < {half}u;", f"      const {idx} k = first ? f : f - {half}u;",
                    f"      const {idx} fa = k, fb = k + {half}u;"]
        else:
            pair = ["      const bool first = (f % 2u) == 0u;", f"      const {idx} k = f / 2u;",
                    f"      const {idx} fa = 2u * k, fb = 2u * k + 1u;"]

        def load(arr, at):
            return f"({acc}){dt.load_from(f'{arr}[{at}]')}"
        body = [_loop(total, idx),
                f"    const {idx} f = i % {d}u, pos = (i / {d}u) % {s}u;",
                f"    const {off} row = ({off})i - f;",
                f"    if (f >= {self.n_rot}u) {{ out[i] = x[i]; continue; }}",
                "    {", *pair,
                f"      const {acc} a = {load('x', 'row + fa')}, b = {load('x', 'row + fb')};",
                f"      const {acc} c = {load('cos_t', f'pos * {max(half, 1)}u + k')}, "
                f"sn = {load('sin_t', f'pos * {max(half, 1)}u + k')};",
                f"      const {acc} y = first ? a * c - b * sn : b * c + a * sn;",
                f"      out[i] = {dt.to_store('y')};", "    }", "  }"]
        return _kernel(f"const {dt.store}* x, const {dt.store}* cos_t, const {dt.store}* sin_t, {dt.store}* out",
                       body)

"""Convolution, transposed convolution and pooling (NCHW; 1-D convs as H = 1).

``conv`` runs by one of two routes, chosen per geometry: a direct kernel (one work-item
per output element, summing channels x taps) for small products, or im2col + the tiled
GEMM of ``rlx_rocm.codegen.linalg`` (the column matrix of every image and group in
scratch memory; the GEMM writes NCHW directly and adds the bias in its epilogue) once
the product is large enough to pay for the column matrix.
``conv_transpose2d`` gathers: each output element sums the input pixels whose taps reach
it. ``pool2d`` walks its window; padding never wins a max and is counted in an average
only with ``count_include_pad`` (positions past the end padding never are).
"""
from __future__ import annotations

import math

from rlx_core.ir import DType, Ref
from rlx_core.ir.ops.conv import pool_geometry

from .base import KernelContext, groups, idx_type, linear_loop
from .linalg import gemm
from .types import ctype, literal, load, store

__all__ = ["GENERATORS", "conv_route", "IM2COL_MIN_MACS", "IM2COL_MAX_BYTES"]

IM2COL_MIN_MACS = 1 << 20    # products below this many multiply-adds run the direct kernel
IM2COL_MAX_BYTES = 1 << 28   # column matrices above this size run the direct kernel


def _geometry(k: KernelContext):
    x, w = k.inputs[0], k.inputs[1]
    a = k.node.attrs
    one_d = x.rank == 3
    n, c = x.dims[:2]
    h, wd = (1, x.dims[2]) if one_d else x.dims[2:]
    kh, kw = (1, w.dims[2]) if one_d else w.dims[2:]
    sh, sw = (1, a["strides"][0]) if one_d else a["strides"]
    dh, dw = (1, a["dilations"][0]) if one_d else a["dilations"]
    pt, pl = (0, a["pads"][0]) if one_d else a["pads"][:2]
    out = k.out.dims
    oh, ow = (1, out[2]) if one_d else out[2:]
    return n, c, h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow


def conv_route(k: KernelContext) -> str:
    n, c, h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow = _geometry(k)
    co, g = k.out.dims[1], k.node.attrs["groups"]
    macs = n * co * oh * ow * (c // g) * kh * kw
    cols = n * c * kh * kw * oh * ow * 4
    forced = k.options.get("conv")
    if forced in ("direct", "im2col"):
        return forced
    return "im2col" if macs >= IM2COL_MIN_MACS and cols <= IM2COL_MAX_BYTES else "direct"


def conv(k: KernelContext) -> None:
    node = k.node
    dt = k.out.dtype
    t = ctype(dt)
    n, c, h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow = _geometry(k)
    co, g = k.out.dims[1], node.attrs["groups"]
    cg, cog = c // g, co // g
    total = k.out.size
    if total == 0:
        return
    bias = len(node.inputs) > 2
    if conv_route(k) == "im2col":
        rows, p = cg * kh * kw, oh * ow
        cols = k.scratch(n * g * rows * p * (8 if t == "double" else 4))
        _im2col(k, cols, n, c, h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, g)
        gemm(k, node.inputs[1], cols, Ref(node.id), dt, cog, p, rows, n * g,
             a_off=f"(batch % {g}) * {cog * rows}", b_off=f"batch * {rows * p}",
             c_off=f"(batch / {g}) * {co * p} + (batch % {g}) * {cog * p}",
             bias=node.inputs[2] if bias else None, bias_off=f"(batch % {g}) * {cog}",
             b_dt=DType.F32 if dt.is_low_float else dt)
        return
    idx = idx_type(total, k.inputs[0].size)
    params, init = _conv_params(k, dt, bias)
    body = f"""    const {idx} q = e % {ow}, r = (e / {ow}) % {oh}, o = (e / {oh * ow}) % {co}, b = e / {co * oh * ow};
    const {idx} gi = o / {cog};
    {t} acc = 0;
    for (int ci = 0; ci < {cg}; ci++) {{
      const {idx} xc = (b * {c} + gi * {cg} + ci) * {h * wd};
      const {idx} wc = (o * {cg} + ci) * {kh * kw};
      for (int th = 0; th < {kh}; th++) {{
        const int ih = (int)r * {sh} - {pt} + th * {dh};
        if (ih < 0 || ih >= {h}) continue;
        for (int tw = 0; tw < {kw}; tw++) {{
          const int iw = (int)q * {sw} - {pl} + tw * {dw};
          if (iw < 0 || iw >= {wd}) continue;
          acc += {load(dt, 'x', f'xc + ih * {wd} + iw')} * {load(dt, 'w', f'wc + th * {kw} + tw')};
        }}
      }}
    }}
    acc += {init};
    {store(dt, 'out', 'e', 'acc')}"""
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


def _conv_params(k: KernelContext, dt, bias: bool):
    """The direct kernels' parameters (x, w, the bias if any, out) and the accumulator's
    start: the bias of output channel ``o``, else 0."""
    node = k.node
    params = [(k.buf("x", dt, True), node.inputs[0]), (k.buf("w", dt, True), node.inputs[1])]
    if bias:
        params.append((k.buf("bias", dt, True), node.inputs[2]))
    params.append((k.buf("out", dt), Ref(node.id)))
    return params, load(dt, "bias", "o") if bias else "0"


def _im2col(k, cols, n, c, h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, g) -> None:
    """cols[(b*g + gi)][(ci*kh + th)*kw + tw][r*ow + q] = x_padded[b, gi*cg + ci, ...], in the
    compute type (f32 for 16-bit floats)."""
    dt = k.out.dtype
    t = ctype(dt)
    cg = c // g
    rows, p = cg * kh * kw, oh * ow
    total = n * g * rows * p
    idx = idx_type(total, k.inputs[0].size)
    params = [(k.buf("x", dt, True), k.node.inputs[0]), (f"__global {t}* cols", cols)]
    body = f"""    const {idx} pq = e % {p}, row = (e / {p}) % {rows}, bg = e / {p * rows};
    const int q = pq % {ow}, r = pq / {ow};
    const int tw = row % {kw}, th = (row / {kw}) % {kh}, ci = row / {kh * kw};
    const int ih = r * {sh} - {pt} + th * {dh}, iw = q * {sw} - {pl} + tw * {dw};
    const {idx} b = bg / {g}, gi = bg % {g};
    {t} v = 0;
    if (ih >= 0 && ih < {h} && iw >= 0 && iw < {wd}) v = {load(dt, 'x', f'((b * {c} + gi * {cg} + ci) * {h} + ih) * {wd} + iw')};
    cols[e] = v;"""
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


def conv_transpose2d(k: KernelContext) -> None:
    node = k.node
    a = node.attrs
    x, w = k.inputs[0], k.inputs[1]
    dt = k.out.dtype
    t = ctype(dt)
    n, ci, h, wd = x.dims
    _, cog, kh, kw = w.dims
    g = a["groups"]
    cig = ci // g
    co, oh, ow = k.out.dims[1:]
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    pt, pl = a["pads"][:2]
    total = k.out.size
    if total == 0:
        return
    bias = len(node.inputs) > 2
    idx = idx_type(total, x.size)
    params, init = _conv_params(k, dt, bias)
    body = f"""    const {idx} q = e % {ow}, r = (e / {ow}) % {oh}, o = (e / {oh * ow}) % {co}, b = e / {co * oh * ow};
    const {idx} gi = o / {cog}, oo = o % {cog};
    {t} acc = 0;
    for (int c = 0; c < {cig}; c++) {{
      const {idx} xc = (b * {ci} + gi * {cig} + c) * {h * wd};
      const {idx} wc = ((gi * {cig} + c) * {cog} + oo) * {kh * kw};
      for (int th = 0; th < {kh}; th++) {{
        const int fh = (int)r + {pt} - th * {dh};
        if (fh < 0 || fh % {sh}) continue;
        const int ih = fh / {sh};
        if (ih >= {h}) continue;
        for (int tw = 0; tw < {kw}; tw++) {{
          const int fw = (int)q + {pl} - tw * {dw};
          if (fw < 0 || fw % {sw}) continue;
          const int iw = fw / {sw};
          if (iw >= {wd}) continue;
          acc += {load(dt, 'x', 'xc + ih * ' + str(wd) + ' + iw')} * {load(dt, 'w', f'wc + th * {kw} + tw')};
        }}
      }}
    }}
    acc += {init};
    {store(dt, 'out', 'e', 'acc')}"""
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


def pool2d(k: KernelContext) -> None:
    node = k.node
    a = node.attrs
    x = k.inputs[0]
    dt = k.out.dtype
    t = ctype(dt)
    n, c, h, wd = x.dims
    oh, ow = k.out.dims[2:]
    kh, kw = a["kernel"]
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    pt, pl, pb, pr = a["pads"]
    total = k.out.size
    if total == 0:
        return
    _, end = pool_geometry((h, wd), a["kernel"], a["strides"], a["dilations"], a["pads"], a["ceil_mode"])
    idx = idx_type(total, x.size)
    params = [(k.buf("x", dt, True), node.inputs[0]), (k.buf("out", dt), Ref(node.id))]
    head = f"""    const {idx} q = e % {ow}, r = (e / {ow}) % {oh}, nc = e / {oh * ow};
    const {idx} xo = nc * {h * wd};"""
    if a["mode"] == "max":
        body = head + f"""
    {t} m = -INFINITY;
    for (int th = 0; th < {kh}; th++) {{
      const int ih = (int)r * {sh} - {pt} + th * {dh};
      if (ih < 0 || ih >= {h}) continue;
      for (int tw = 0; tw < {kw}; tw++) {{
        const int iw = (int)q * {sw} - {pl} + tw * {dw};
        if (iw < 0 || iw >= {wd}) continue;
        const {t} v = {load(dt, 'x', f'xo + ih * {wd} + iw')};
        m = (v > m || isnan(v) || isnan(m)) ? (isnan(m) ? m : v) : m;
      }}
    }}
    {store(dt, 'out', 'e', 'm')}"""
    else:
        if a["count_include_pad"]:
            lo_h, hi_h, lo_w, hi_w = 0, h + pt + pb, 0, wd + pl + pr
        else:
            lo_h, hi_h, lo_w, hi_w = pt, pt + h, pl, pl + wd
        body = head + f"""
    {t} s = 0, cnt = 0;
    for (int th = 0; th < {kh}; th++) {{
      const int ph = (int)r * {sh} + th;
      for (int tw = 0; tw < {kw}; tw++) {{
        const int pw = (int)q * {sw} + tw;
        if (ph >= {lo_h} && ph < {hi_h} && pw >= {lo_w} && pw < {hi_w}) cnt += 1;
        const int ih = ph - {pt}, iw = pw - {pl};
        if (ih >= 0 && ih < {h} && iw >= 0 && iw < {wd}) s += {load(dt, 'x', f'xo + ih * {wd} + iw')};
      }}
    }}
    {store(dt, 'out', 'e', 's / cnt')}"""
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


GENERATORS = {"conv": conv, "conv_transpose2d": conv_transpose2d, "pool2d": pool2d}

"""conv (1-D and 2-D), conv_transpose2d and pool2d: one invocation per output element
summing (or reducing) over its window with the geometry baked in. Taps that fall in the
padding are skipped; ``conv_transpose2d`` gathers, for each output position, the input
positions whose scatter reaches it (those where the offset is a multiple of the stride).
Accumulation is in f32 (16-bit floats rounded once).
"""
from __future__ import annotations

import itertools

from .base import KernelContext, generator
from .reduce import acc_load, acc_store
from .wgsl import WORKGROUP, grid, i32, linear_id, shader, strides, u32, unravel


def _emit(k: KernelContext, names: list[str], lines: list[str]) -> None:
    """One invocation per output element running ``lines`` (which write ``out[i]``)."""
    out = k.outs[0]
    if out.size == 0:
        return
    st = k.storage(out.dtype)
    body = (f"  let i = {linear_id()};\n  if (i >= {u32(out.size)}) {{ return; }}\n"
            + "".join(f"  {line}\n" for line in lines))
    k.emit(shader([(n, st) for n in names] + [("out", st)], body),
           [k.input(j) for j in range(len(names))] + [k.output()], grid(out.size, WORKGROUP, k.max_grid))


def _coords(k: KernelContext) -> list[str]:
    """``let`` lines naming the output coordinates n, o, p0 (, p1)."""
    names = ["n", "o"] + [f"p{a}" for a in range(k.outs[0].rank - 2)]
    return [f"let {name} = {c};" for name, c in zip(names, unravel("i", k.outs[0].dims))]


@generator("conv")
def conv(k: KernelContext) -> None:
    a, x, w = k.attrs, k.ins[0], k.ins[1]
    spatial = x.rank - 2
    co, cg = w.dims[:2]
    per_group = co // a["groups"]
    taps = w.dims[2:]
    x_st, w_st = strides(x.dims), strides(w.dims)
    lines = _coords(k) + [f"let g = o / {u32(per_group)};", "var acc = 0.0f;",
                          f"for (var c = 0u; c < {u32(cg)}; c = c + 1u) {{",
                          f"  let xc = n * {u32(x_st[0])} + (g * {u32(cg)} + c) * {u32(x_st[1])};",
                          f"  let wc = o * {u32(w_st[0])} + c * {u32(w_st[1])};"]
    for tap in itertools.product(*(range(t) for t in taps)):
        pos = [f"i32(p{ax}) * {a['strides'][ax]}i + {tap[ax] * a['dilations'][ax] - a['pads'][ax]}i"
               for ax in range(spatial)]
        inside = " && ".join(f"u{ax} >= 0i && u{ax} < {i32(x.dims[2 + ax])}" for ax in range(spatial))
        x_at = " + ".join(["xc"] + [f"u32(u{ax}) * {u32(x_st[2 + ax])}" for ax in range(spatial)])
        w_at = " + ".join(["wc", u32(sum(t * s for t, s in zip(tap, w_st[2:])))])
        lines.append("  { " + " ".join(f"let u{ax} = {p};" for ax, p in enumerate(pos))
                     + f" if ({inside}) {{ acc = acc + {acc_load(x.dtype, f'x[{x_at}]')} * "
                     f"{acc_load(x.dtype, f'w[{w_at}]')}; }} }}")
    lines.append("}")
    _finish(k, lines, 2)


def _finish(k: KernelContext, lines: list[str], bias_input: int) -> None:
    """Add the optional bias (input ``bias_input``) per output channel and store."""
    dt = k.outs[0].dtype
    names = ["x", "w"]
    if len(k.ins) > bias_input:
        names.append("bias")
        lines.append(f"acc = acc + {acc_load(dt, 'bias[o]')};")
    lines.append(f"out[i] = {acc_store(dt, 'acc')};")
    _emit(k, names, lines)


@generator("conv_transpose2d")
def conv_transpose2d(k: KernelContext) -> None:
    """out[n, o, y, x] gathers x[n, i, h, w] * w[i, o', th, tw] over the input channels i
    of o's group and the taps with y + pad_top = h*stride + th*dilation (same for x)."""
    a, x, w = k.attrs, k.ins[0], k.ins[1]
    ci, per_group = w.dims[:2]
    in_per_group = ci // a["groups"]
    x_st, w_st = strides(x.dims), strides(w.dims)
    lines = _coords(k) + [f"let g = o / {u32(per_group)};", f"let ol = o % {u32(per_group)};", "var acc = 0.0f;",
                          f"for (var c = 0u; c < {u32(in_per_group)}; c = c + 1u) {{",
                          f"  let ic = g * {u32(in_per_group)} + c;",
                          f"  let xc = n * {u32(x_st[0])} + ic * {u32(x_st[1])};",
                          f"  let wc = ic * {u32(w_st[0])} + ol * {u32(w_st[1])};"]
    for th, tw in itertools.product(range(w.dims[2]), range(w.dims[3])):
        conds, coords = [], []
        for ax, t in ((0, th), (1, tw)):
            s = a["strides"][ax]
            off = f"(i32(p{ax}) + {a['pads'][ax] - t * a['dilations'][ax]}i)"
            conds.append(f"{off} >= 0i && {off} % {s}i == 0i && {off} / {s}i < {i32(x.dims[2 + ax])}")
            coords.append(f"u32({off} / {s}i) * {u32(x_st[2 + ax])}")
        w_at = f"wc + {u32(th * w_st[2] + tw * w_st[3])}"
        x_at = "xc + " + " + ".join(coords)
        lines.append(f"  if ({' && '.join(conds)}) {{ acc = acc + "
                     f"{acc_load(x.dtype, f'x[{x_at}]')} * {acc_load(x.dtype, f'w[{w_at}]')}; }}")
    lines.append("}")
    _finish(k, lines, 2)


@generator("pool2d")
def pool2d(k: KernelContext) -> None:
    a, x = k.attrs, k.ins[0]
    is_max = a["mode"] == "max"
    x_st = strides(x.dims)
    lines = _coords(k) + [f"let xc = n * {u32(x_st[0])} + o * {u32(x_st[1])};",
                          "var acc = bitcast<f32>(0xff800000u);" if is_max else "var acc = 0.0f;", "var count = 0.0f;"]
    for th, tw in itertools.product(range(a["kernel"][0]), range(a["kernel"][1])):
        u = [f"i32(p{ax}) * {a['strides'][ax]}i + {t * a['dilations'][ax] - a['pads'][ax]}i"
             for ax, t in ((0, th), (1, tw))]
        inside = " && ".join(f"u{ax} >= 0i && u{ax} < {i32(x.dims[2 + ax])}" for ax in range(2))
        value = acc_load(x.dtype, f"x[xc + u32(u0) * {u32(x_st[2])} + u32(u1)]")
        step = f"acc = rlx_max(acc, {value});" if is_max else f"acc = acc + {value};"
        counted = inside if not a["count_include_pad"] else " && ".join(
            f"u{ax} >= {-a['pads'][ax]}i && u{ax} < {i32(x.dims[2 + ax] + a['pads'][2 + ax])}" for ax in range(2))
        lines.append(f"{{ let u0 = {u[0]}; let u1 = {u[1]}; if ({inside}) {{ {step} }}"
                     + ("" if is_max else f" if ({counted}) {{ count = count + 1.0f; }}") + " }")
    lines.append(f"out[i] = {acc_store(x.dtype, 'acc' if is_max else 'acc / count')};")
    _emit(k, ["x"], lines)

"""Convolutions and pooling: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, the global
pools, Col2Im and MaxUnpool.

The IR's ``conv`` and ``conv_transpose2d`` take 1-D/2-D and 2-D inputs, ``pool2d`` 2-D;
1-D ONNX inputs get a unit height axis. Everything else (3-D and up, integer pooling,
dilated averages, MaxPool's Indices) gathers every window at once (``_Windows``) and
reduces or multiplies them. ONNX's ``auto_pad`` is resolved into explicit pads, and
``strides`` are always passed explicitly (``pool2d`` would default them to the kernel,
ONNX to 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.dtypes import DType
from ...ir.ops.conv import sliding_output_size
from ..onnx import onnx_op
from .tensor import scatter_rows


@dataclass(frozen=True)
class Window:
    """Window geometry over n spatial axes: ``kernel``, ``strides``, ``dilations`` (n
    each) and ``pads`` (n begins, then n ends)."""

    kernel: tuple
    strides: tuple
    dilations: tuple
    pads: tuple

    @classmethod
    def of_node(cls, ctx, in_dims, kernel) -> "Window":
        """The node's attributes, ``auto_pad`` resolved."""
        n = len(in_dims)
        kernel = tuple(kernel)
        strides, dilations = tuple(ctx.attr("strides", [1] * n)), tuple(ctx.attr("dilations", [1] * n))
        pads = tuple(ctx.attr("pads", [0] * (2 * n)))
        auto_pad = ctx.attr("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = same_pads(in_dims, kernel, strides, dilations, auto_pad == "SAME_UPPER")
        elif auto_pad == "VALID":
            pads = (0,) * (2 * n)
        elif auto_pad != "NOTSET":
            raise ctx.error(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")
        return cls(kernel, strides, dilations, pads)

    def with_unit_axis(self) -> "Window":
        """The geometry with a leading unit axis, for running a 1-D op as 2-D."""
        return Window((1,) + self.kernel, (1,) + self.strides, (1,) + self.dilations,
                      (0, self.pads[0], 0, self.pads[1]))


def same_pads(in_dims, kernel, strides, dilations, upper: bool) -> tuple[int, ...]:
    """``auto_pad=SAME_*``: output ``ceil(in / stride)``; the padding that needs, split in
    half with the odd one at the end (UPPER) or the beginning (LOWER)."""
    begins, ends = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if upper else big)
        ends.append(big if upper else small)
    return tuple(begins + ends)


# --- convolutions -----------------------------------------------------------------------
@onnx_op("Conv")
def conv(ctx):
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    win = Window.of_node(ctx, x.dims[2:], ctx.attr("kernel_shape", w.dims[2:]))
    return convolve(ctx, x, w, b, win, ctx.attr("group", 1))


def convolve(ctx, x, w, b, win: Window, groups: int):
    """The IR's ``conv`` for 1-D/2-D; for more spatial axes one matmul per group over the
    gathered windows (im2col): ``[N, G, P, C/G * K] @ [G, C/G * K, M/G]``."""
    g = ctx.g
    if x.rank in (3, 4):
        return g.conv(x, w, b, strides=win.strides, pads=win.pads, dilations=win.dilations, groups=groups)
    windows = _Windows(ctx, x, win, ceil_mode=False)
    n, c = x.dims[:2]
    m, taps, positions = w.dims[0], windows.taps, windows.positions
    cols = g.where(windows.real, windows.values, g.as_value(0, x.dtype))  # [N, C, P, K]
    cols = g.transpose(g.reshape(cols, [n, groups, c // groups, positions, taps]), [0, 1, 3, 2, 4])
    cols = g.reshape(cols, [n, groups, positions, c // groups * taps])
    kernel = g.transpose(g.reshape(w, [groups, m // groups, c // groups * taps]), [0, 2, 1])
    y = g.transpose(g.matmul(cols, kernel), [0, 1, 3, 2])  # [N, G, M/G, P]
    y = g.reshape(y, [n, m] + windows.out_dims)
    return y if b is None else y + g.reshape(b, [m] + [1] * len(windows.out_dims))


@onnx_op("ConvTranspose")
def conv_transpose(ctx):
    """Pads come from ``pads`` or, with ``output_shape`` / ``auto_pad=SAME_*``, from the
    size asked for (split as ONNX does). ``output_padding`` only shortens the end crop,
    so it is folded into the end pads."""
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    n = x.rank - 2
    strides = tuple(ctx.attr("strides", [1] * n))
    dilations = tuple(ctx.attr("dilations", [1] * n))
    extra = tuple(ctx.attr("output_padding", [0] * n))
    kernel = tuple(ctx.attr("kernel_shape", w.dims[2:]))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    wanted = ctx.attr("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [size * s for size, s in zip(x.dims[2:], strides)]
    if wanted is not None:
        full = [s * (size - 1) + op + (k - 1) * d + 1 for size, s, op, k, d in
                zip(x.dims[2:], strides, extra, kernel, dilations)]
        totals = [f - o for f, o in zip(full, list(wanted)[-n:])]
        upper = auto_pad == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - bgn for t, bgn in zip(totals, begins)]
    else:
        pads = ctx.attr("pads", [0] * (2 * n))
        begins, ends = list(pads[:n]), list(pads[n:])
    ends = [e - op for e, op in zip(ends, extra)]
    return transposed_convolve(ctx, x, w, b, Window(kernel, strides, dilations, tuple(begins + ends)),
                               ctx.attr("group", 1))


def transposed_convolve(ctx, x, w, b, win: Window, groups: int):
    """Transposed convolution whose ``win.pads`` crop the full result (a negative pad
    extends it with zeros, before the bias). 1-D/2-D on the IR's ``conv_transpose2d``;
    more spatial axes as the equivalent convolution: stride-dilated input, padded by
    ``dilation * (k - 1) - pad``, convolved with the flipped, channel-swapped kernel."""
    g = ctx.g
    n = x.rank - 2
    begins, ends = win.pads[:n], win.pads[n:]
    if n > 2:
        for axis, s in enumerate(win.strides):
            x = _spread_out(g, x, axis + 2, s)
        reach = [(k - 1) * d for k, d in zip(win.kernel, win.dilations)]
        x = g.pad(x, [(0, 0), (0, 0)] + [(r - bgn, r - end) for r, bgn, end in zip(reach, begins, ends)])
        ci, co_g = w.dims[:2]
        flipped = g.reshape(g.transpose(g.reshape(w, [groups, ci // groups, co_g] + list(w.dims[2:])),
                                        [0, 2, 1] + list(range(3, n + 3))), [groups * co_g, ci // groups] + list(w.dims[2:]))
        for axis in range(2, n + 2):
            k = flipped.dims[axis]
            flipped = g.slice(flipped, [k - 1], [-k - 1], [-1], axes=[axis])
        return convolve(ctx, x, flipped, b, Window(win.kernel, (1,) * n, win.dilations, (0,) * (2 * n)), groups)
    one_d = n == 1
    if one_d:
        x, w = g.unsqueeze(x, [2]), g.unsqueeze(w, [2])
        win, begins, ends = win.with_unit_axis(), (0,) + tuple(begins), (0,) + tuple(ends)
    grow = [(0, 0), (0, 0)] + [(max(-bgn, 0), max(-end, 0)) for bgn, end in zip(begins, ends)]
    needs_growth = any(p for pair in grow for p in pair)
    y = g.conv_transpose2d(x, w, None if needs_growth else b, strides=win.strides,
                           pads=[max(p, 0) for p in begins + ends], dilations=win.dilations, groups=groups)
    if needs_growth:
        y = g.pad(y, grow)
        if b is not None:
            y = y + g.reshape(b, [b.dims[0], 1, 1])
    return g.squeeze(y, [2]) if one_d else y


def _spread_out(g, x, axis, stride):
    """``stride - 1`` zeros between consecutive elements along ``axis``."""
    if stride == 1:
        return x
    n = x.dims[axis]
    pads = [(0, 0)] * (x.rank + 1)
    pads[axis + 1] = (0, stride - 1)
    spread = g.reshape(g.pad(g.unsqueeze(x, [axis + 1]), pads), x.dims[:axis] + (n * stride,) + x.dims[axis + 1:])
    return g.slice(spread, [0], [(n - 1) * stride + 1], axes=[axis])


@onnx_op("Col2Im")
def col2im(ctx):
    """Sum the columns ``[N, C*K, L]`` back into ``[N, C, *image]``: a transposed
    convolution (groups = C) whose kernel routes input channel ``(c, tap)`` to that tap of
    output channel c."""
    g = ctx.g
    x = ctx.input(0)
    image, block = ctx.const_ints(1), ctx.const_ints(2)
    nd = len(image)
    strides, dilations = tuple(ctx.attr("strides", [1] * nd)), tuple(ctx.attr("dilations", [1] * nd))
    pads = tuple(ctx.attr("pads", [0] * (2 * nd)))
    blocks = [sliding_output_size(size, k, s, d, pads[a], pads[a + nd])
              for a, (size, k, s, d) in enumerate(zip(image, block, strides, dilations))]
    taps = math.prod(block)
    n, ck, length = x.dims
    if ck % taps or length != math.prod(blocks):
        raise ctx.error(f"input {list(x.dims)} does not hold [N, C*{taps}, {math.prod(blocks)}] columns "
                        f"for image {list(image)} and block {list(block)}")
    c = ck // taps
    route = np.tile(np.eye(taps, dtype=x.dtype.np).reshape((taps, 1) + tuple(block)), (c,) + (1,) * (nd + 1))
    y = transposed_convolve(ctx, g.reshape(x, [n, ck] + blocks), g.constant(route), None,
                            Window(tuple(block), strides, dilations, pads), c)
    short = [size - got for size, got in zip(image, y.dims[2:])]  # positions no block reaches
    return g.pad(y, [(0, 0), (0, 0)] + [(0, s) for s in short]) if any(short) else y


# --- pooling ----------------------------------------------------------------------------
@onnx_op("MaxPool", "AveragePool")
def pool(ctx):
    """The IR's ``pool2d`` for 1-D/2-D float pooling; window gathers for the rest (3-D,
    integers, dilated averages, MaxPool's Indices output)."""
    x = ctx.input(0)
    win = Window.of_node(ctx, x.dims[2:], ctx.attr("kernel_shape"))
    mode = "max" if ctx.op_type == "MaxPool" else "avg"
    ceil_mode, include_pad = bool(ctx.attr("ceil_mode", 0)), bool(ctx.attr("count_include_pad", 0))
    if x.rank in (3, 4) and x.dtype.is_float and not ctx.wants(1) and (mode == "max" or set(win.dilations) == {1}):
        one_d = x.rank == 3
        win2 = win.with_unit_axis() if one_d else win
        y = ctx.g.pool2d(ctx.g.unsqueeze(x, [2]) if one_d else x, mode, list(win2.kernel), strides=list(win2.strides),
                         pads=list(win2.pads), dilations=list(win2.dilations), count_include_pad=include_pad,
                         ceil_mode=ceil_mode)
        return ctx.g.squeeze(y, [2]) if one_d else y
    windows = _Windows(ctx, x, win, ceil_mode)
    if mode == "avg":
        return windows.mean(include_pad)
    return [windows.max(), windows.argmax_positions(ctx.attr("storage_order", 0))] if ctx.wants(1) else windows.max()


@onnx_op("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx):
    g = ctx.g
    x = ctx.input(0)
    axes = list(range(2, x.rank))
    if ctx.op_type == "GlobalAveragePool":
        return g.mean(x, axes, True)
    if ctx.op_type == "GlobalMaxPool":
        return g.reduce_max(x, axes, True)
    p = float(ctx.attr("p", 2))
    return g.pow(g.sum(g.pow(g.abs(x), p), axes, True), 1 / p)


@onnx_op("LpPool")
def lp_pool(ctx):
    """``(sum over the window's input elements of |x|^p)^(1/p)``."""
    x = ctx.input(0)
    windows = _Windows(ctx, x, Window.of_node(ctx, x.dims[2:], ctx.attr("kernel_shape")),
                       bool(ctx.attr("ceil_mode", 0)))
    return windows.lp_norm(float(ctx.attr("p", 2)))


class _Windows:
    """Every pooling window of ``x [N, C, *spatial]`` gathered at once: ``values [N, C,
    *out, K]`` (K taps per window, read by one gather from the flattened input), and
    constants saying for each (window, tap) whether it lands on the input (``real``)
    or inside the padded input (``padded``), and which flat input position it reads."""

    def __init__(self, ctx, x, win: Window, ceil_mode: bool):
        g = self.g = ctx.g
        self.x, spatial = x, x.dims[2:]
        nd = len(spatial)
        self.out_dims = [sliding_output_size(size, k, s, d, win.pads[i], win.pads[i + nd], ceil_mode)
                         for i, (size, k, s, d) in enumerate(zip(spatial, win.kernel, win.strides, win.dilations))]
        if min(self.out_dims, default=1) < 1:
            raise ctx.error(f"the padded input {list(spatial)} is smaller than the kernel {list(win.kernel)}")
        # coordinate of tap t of window o along axis i, laid out [*out, *kernel]
        coords = []
        for i, (o, k, s, d) in enumerate(zip(self.out_dims, win.kernel, win.strides, win.dilations)):
            c = np.arange(o)[:, None] * s + np.arange(k)[None, :] * d - win.pads[i]
            shape = [1] * (2 * nd)
            shape[i], shape[nd + i] = o, k
            coords.append(c.reshape(shape))
        real, padded = np.ones((1,) * (2 * nd), bool), np.ones((1,) * (2 * nd), bool)
        for i, c in enumerate(coords):
            real = real & (c >= 0) & (c < spatial[i])
            padded = padded & (c >= -win.pads[i]) & (c < spatial[i] + win.pads[i + nd])
        self.positions, self.taps = int(np.prod(self.out_dims)), int(np.prod(win.kernel))
        full = tuple(self.out_dims) + tuple(win.kernel)
        self._coords = [np.broadcast_to(np.clip(c, 0, n - 1), full) for c, n in zip(coords, spatial)]
        layout = (self.positions, self.taps)
        self._real = np.broadcast_to(real, full).reshape(layout)
        self.padded = np.broadcast_to(padded, full).reshape(layout)
        flat = np.ravel_multi_index(self._coords, spatial).reshape(-1)
        n, c = x.dims[:2]
        values = g.gather(g.reshape(x, [n, c, int(np.prod(spatial))]), flat.astype(np.int64), axis=2)
        self.values = g.reshape(values, [n, c, self.positions, self.taps])
        self.real = g.constant(self._real)

    def _reshaped(self, y):
        return self.g.reshape(y, list(self.x.dims[:2]) + self.out_dims)

    def _lowest(self):
        dt = self.x.dtype
        return self.g.as_value(-np.inf if dt.is_float else np.iinfo(dt.np).min, dt)

    def max(self):
        """Padding never wins (a window with no input element gives the lowest value)."""
        return self._reshaped(self.g.reduce_max(self.g.where(self.real, self.values, self._lowest()), [-1]))

    def argmax_positions(self, storage_order: int):
        """MaxPool's Indices: the flat position (over all of x) of each window's first
        largest element; ``storage_order=1`` flattens the spatial axes column-major."""
        g = self.g
        tap = g.argmax(g.where(self.real, self.values, self._lowest()), -1)  # [N, C, P]
        spatial = self.x.dims[2:]
        table = np.ravel_multi_index(self._coords, spatial, order="F" if storage_order else "C")
        linear = g.constant(np.arange(self.positions, dtype=np.int64) * self.taps) + tap
        position = g.gather(g.constant(table.reshape(-1).astype(np.int64)), linear)  # [N, C, P]
        n, c = self.x.dims[:2]
        channel = np.arange(n * c, dtype=np.int64).reshape(n, c, 1) * int(np.prod(spatial))
        return self._reshaped(position + channel)

    def mean(self, include_pad: bool):
        g = self.g
        total = g.sum(g.where(self.real, self.values, g.as_value(0, self.x.dtype)), [-1])
        counts = (self.padded if include_pad else self._real).sum(axis=-1).astype(self.x.dtype.np)
        return self._reshaped(total / g.constant(counts))

    def lp_norm(self, p: float):
        g = self.g
        powered = g.abs(self.values) if p == 1 else g.pow(g.abs(self.values), p)
        total = g.sum(g.where(self.real, powered, g.as_value(0, self.x.dtype)), [-1])
        return self._reshaped(total if p == 1 else g.pow(total, 1 / p))


@onnx_op("MaxUnpool")
def max_unpool(ctx):
    """Zeros of the unpooled size (``output_shape``, else ``(in - 1) * stride + kernel -
    pads``) with each value written at its flat index (MaxPool's Indices)."""
    g = ctx.g
    x, indices = ctx.input(0), ctx.input(1)
    n = x.rank - 2
    kernel = ctx.attr("kernel_shape")
    strides, pads = ctx.attr("strides", [1] * n), ctx.attr("pads", [0] * (2 * n))
    shape = ctx.const_ints(2)
    if shape is None:
        shape = tuple(x.dims[:2]) + tuple((size - 1) * s + k - pads[i] - pads[i + n] for i, (size, s, k) in
                                          enumerate(zip(x.dims[2:], strides, kernel)))
    zeros = g.constant(np.zeros(math.prod(shape), x.dtype.np))
    flat = scatter_rows(ctx, zeros, g.reshape(g.cast(indices, DType.I64), [-1]), g.reshape(x, [-1]), "none")
    return g.reshape(flat, list(shape))

"""Convolutions and pooling: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, the global
pools and Col2Im.

The IR's ``conv``, ``conv_transpose2d`` and ``pool2d`` take 1-D/2-D (conv) or 2-D
(pooling, transposed conv) inputs; 1-D ONNX inputs get a unit height axis. ONNX's
``auto_pad`` is resolved into explicit pads here, and ``strides`` are always passed
explicitly (``pool2d`` would default them to the kernel, ONNX to 1).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.ops.conv import sliding_output_size
from ..onnx import onnx_op


class _Window:
    """A node's window geometry for ``n`` spatial axes, ``auto_pad`` resolved: ``kernel``,
    ``strides``, ``dilations``, ``pads`` (begins then ends)."""

    def __init__(self, ctx, in_dims, kernel):
        n = len(in_dims)
        self.kernel = tuple(kernel)
        self.strides = tuple(ctx.attr("strides", [1] * n))
        self.dilations = tuple(ctx.attr("dilations", [1] * n))
        self.pads = tuple(ctx.attr("pads", [0] * (2 * n)))
        auto_pad = ctx.attr("auto_pad", "NOTSET")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            self.pads = same_pads(in_dims, self.kernel, self.strides, self.dilations, auto_pad == "SAME_UPPER")
        elif auto_pad == "VALID":
            self.pads = (0,) * (2 * n)
        elif auto_pad != "NOTSET":
            raise ctx.error(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")

    def padded_1d(self):
        """The geometry with a leading unit axis, for running a 1-D op as 2-D."""
        w = object.__new__(_Window)
        w.kernel, w.strides, w.dilations = (1,) + self.kernel, (1,) + self.strides, (1,) + self.dilations
        w.pads = (0, self.pads[0], 0, self.pads[1])
        return w


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


def _as_2d(ctx, x):
    """``x`` with a unit height axis when it is 1-D spatially; 3-D and up are unsupported."""
    spatial = x.rank - 2
    if spatial == 1:
        return ctx.g.unsqueeze(x, [2])
    if spatial != 2:
        raise ctx.unsupported(f"{ctx.op_type} over {spatial} spatial axes (RLX has 1-D and 2-D windows)")
    return x


def _from_2d(ctx, y, spatial):
    return ctx.g.squeeze(y, [2]) if spatial == 1 else y


# --- convolutions -----------------------------------------------------------------------
@onnx_op("Conv")
def conv(ctx):
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    win = _Window(ctx, x.dims[2:], ctx.attr("kernel_shape", w.dims[2:]))
    groups = ctx.attr("group", 1)
    if x.rank in (3, 4):
        return ctx.g.conv(x, w, b, strides=win.strides, pads=win.pads, dilations=win.dilations, groups=groups)
    return _conv_by_windows(ctx, x, w, b, win, groups)


def _conv_by_windows(ctx, x, w, b, win, groups):
    """Convolution over any number of spatial axes as one matmul per group over the
    gathered windows (im2col): ``[N, G, P, C/G * K] @ [G, C/G * K, M/G]``."""
    g = ctx.g
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
    size asked for. ``output_padding`` only shortens the end crop, so it is folded into
    the end pads; a negative pad (output larger than the full transposed convolution)
    extends the result with zeros before the bias is added."""
    g = ctx.g
    x, w, b = ctx.input(0), ctx.input(1), ctx.input(2)
    spatial = x.rank - 2
    x2, w2 = _as_2d(ctx, x), _as_2d(ctx, w)
    n = len(x.dims[2:])
    strides = tuple(ctx.attr("strides", [1] * n))
    dilations = tuple(ctx.attr("dilations", [1] * n))
    extra = tuple(ctx.attr("output_padding", [0] * n))
    kernel = tuple(ctx.attr("kernel_shape", w.dims[2:]))
    full = [s * (size - 1) + op + (k - 1) * d + 1 for size, s, op, k, d in
            zip(x.dims[2:], strides, extra, kernel, dilations)]
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    wanted = ctx.attr("output_shape")
    if wanted is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [size * s for size, s in zip(x.dims[2:], strides)]
    if wanted is not None:
        wanted = list(wanted)[-n:]
        totals = [f - o for f, o in zip(full, wanted)]
        upper = auto_pad == "SAME_UPPER"
        begins = [t // 2 if upper else t - t // 2 for t in totals]
        ends = [t - bgn for t, bgn in zip(totals, begins)]
    else:
        pads = ctx.attr("pads", [0] * (2 * n))
        begins, ends = list(pads[:n]), list(pads[n:])
    ends = [e - op for e, op in zip(ends, extra)]
    if spatial == 1:
        strides, dilations, begins, ends = (1,) + strides, (1,) + dilations, [0] + begins, [0] + ends
    crop = [max(p, 0) for p in begins + ends]
    grow = [(0, 0), (0, 0)] + [(max(-bgn, 0), max(-end, 0)) for bgn, end in zip(begins, ends)]
    needs_growth = any(p for pair in grow for p in pair)
    y = g.conv_transpose2d(x2, w2, None if needs_growth else b, strides=strides, pads=crop, dilations=dilations,
                           groups=ctx.attr("group", 1))
    if needs_growth:
        y = g.pad(y, grow)
        if b is not None:
            y = y + g.reshape(b, [b.dims[0], 1, 1])
    return _from_2d(ctx, y, spatial)


# --- pooling ----------------------------------------------------------------------------
@onnx_op("MaxPool", "AveragePool")
def pool(ctx):
    """The IR's ``pool2d`` for 1-D/2-D float pooling; window gathers for the rest (3-D,
    integers, dilated averages, MaxPool's Indices output)."""
    x = ctx.input(0)
    win = _Window(ctx, x.dims[2:], ctx.attr("kernel_shape"))
    mode = "max" if ctx.op_type == "MaxPool" else "avg"
    ceil_mode, include_pad = bool(ctx.attr("ceil_mode", 0)), bool(ctx.attr("count_include_pad", 0))
    if x.rank in (3, 4) and x.dtype.is_float and not ctx.wants(1) and (mode == "max" or set(win.dilations) == {1}):
        spatial = x.rank - 2
        win2 = win.padded_1d() if spatial == 1 else win
        y = ctx.g.pool2d(_as_2d(ctx, x), mode, list(win2.kernel), strides=list(win2.strides), pads=list(win2.pads),
                         dilations=list(win2.dilations), count_include_pad=include_pad, ceil_mode=ceil_mode)
        return _from_2d(ctx, y, spatial)
    windows = _Windows(ctx, x, win, ceil_mode)
    if mode == "avg":
        return windows.mean(include_pad)
    return [windows.max(), windows.argmax_positions(ctx.attr("storage_order", 0))] if ctx.wants(1) else windows.max()


@onnx_op("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx):
    x = ctx.input(0)
    axes = list(range(2, x.rank))
    return ctx.g.mean(x, axes, True) if ctx.op_type == "GlobalAveragePool" else ctx.g.reduce_max(x, axes, True)


@onnx_op("LpPool")
def lp_pool(ctx):
    """``(sum over the window's input elements of |x|^p)^(1/p)``."""
    x = ctx.input(0)
    windows = _Windows(ctx, x, _Window(ctx, x.dims[2:], ctx.attr("kernel_shape")), bool(ctx.attr("ceil_mode", 0)))
    return windows.lp_norm(float(ctx.attr("p", 2)))


class _Windows:
    """Every pooling window of ``x [N, C, *spatial]`` gathered at once: ``values [N, C,
    *out, K]`` (K taps per window, read by one gather from the flattened input), and
    constants saying for each (window, tap) whether it lands on the input (``real``)
    or inside the padded input (``padded``), and which flat input position it reads."""

    def __init__(self, ctx, x, win: _Window, ceil_mode: bool):
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


@onnx_op("Col2Im")
def col2im(ctx):
    """Sum the columns ``[N, C*bh*bw, L]`` back into ``[N, C, H, W]`` images: a transposed
    convolution (groups = C) whose kernel routes input channel ``(c, i, j)`` to tap
    ``(i, j)`` of output channel c."""
    g = ctx.g
    x = ctx.input(0)
    image, block = ctx.const_ints(1), ctx.const_ints(2)
    if len(image) != 2:
        raise ctx.unsupported(f"Col2Im of {len(image)}-D images (RLX has 2-D transposed convolutions)")
    strides, dilations = tuple(ctx.attr("strides", [1, 1])), tuple(ctx.attr("dilations", [1, 1]))
    pads = tuple(ctx.attr("pads", [0, 0, 0, 0]))
    blocks = [sliding_output_size(size, k, s, d, pads[a], pads[a + 2])
              for a, (size, k, s, d) in enumerate(zip(image, block, strides, dilations))]
    taps = math.prod(block)
    n, ck, length = x.dims
    if ck % taps or length != math.prod(blocks):
        raise ctx.error(f"input {list(x.dims)} does not hold [N, C*{taps}, {math.prod(blocks)}] columns "
                        f"for image {list(image)} and block {list(block)}")
    c = ck // taps
    route = np.tile(np.eye(taps, dtype=x.dtype.np).reshape(taps, 1, *block), (c, 1, 1, 1))
    y = g.conv_transpose2d(g.reshape(x, [n, ck] + blocks), route, strides=strides, dilations=dilations,
                           pads=[max(p, 0) for p in pads], groups=c)
    short = [size - got for size, got in zip(image, y.dims[2:])]  # rows no block reaches
    return g.pad(y, [(0, 0), (0, 0)] + [(0, s) for s in short]) if any(short) else y

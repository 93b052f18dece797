"""Resize, and the grid ops GridSample and AffineGrid.

ONNX defines Resize separably: each resized axis is interpolated on its own, output
position ``o`` reading ``n`` neighbouring input positions with weights that depend only
on ``o`` (and the sizes and attributes). Shapes are static, so those neighbours and
weights are computed here, once, in f64: ``nearest`` becomes one gather per axis
(exact for every dtype), ``linear`` and ``cubic`` a matmul per axis with the
``[out, in]`` interpolation matrix.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ..onnx import computed_in_f32, onnx_op
from .quant import saturate
from .tensor import ordered_axes


@onnx_op("Resize")
def resize(ctx):
    g = ctx.g
    x = ctx.input(0)
    rank = x.rank
    axes = ordered_axes(ctx, ctx.attr("axes", range(rank)), rank)
    roi, scales, sizes = ctx.const(1), ctx.const(2), ctx.const(3)
    roi = None if roi is None or roi.size == 0 else np.asarray(roi, np.float64)
    scales = None if scales is None or scales.size == 0 else [float(s) for s in scales]
    out_sizes, factors = _output_sizes(ctx, x.dims, axes, scales, None if sizes is None or sizes.size == 0
                                       else [int(s) for s in sizes])
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"Resize mode must be nearest, linear or cubic, got {mode!r}")
    if mode == "nearest" or x.dtype in (DType.F32, DType.F64):
        return _resize_axes(ctx, x, axes, roi, out_sizes, factors, mode)
    # 16-bit floats interpolate in f32, integers in f64 (then rounded and clamped, as ONNX does)
    y = _resize_axes(ctx, g.cast(x, DType.F32 if x.dtype.is_float else DType.F64), axes, roi, out_sizes,
                     factors, mode)
    return g.cast(y, x.dtype) if x.dtype.is_float else saturate(g, y, x.dtype)


def _resize_axes(ctx, x, axes, roi, out_sizes, factors, mode):
    g = ctx.g
    rank = x.rank
    for i, axis in enumerate(axes):
        n_in, n_out, factor = x.dims[axis], out_sizes[i], factors[i]
        axis_roi = None if roi is None else (roi[i], roi[i + len(axes)])
        if n_out == n_in and math.isclose(factor, 1.0) and (axis_roi is None or axis_roi == (0.0, 1.0)):
            continue
        idx, weights, outside = _axis_taps(ctx, mode, n_in, n_out, factor, axis_roi)
        if mode == "nearest":
            x = g.gather(x, (idx * weights).sum(axis=1).astype(np.int64), axis=axis)
        else:
            matrix = np.zeros((n_out, n_in))
            np.add.at(matrix, (np.repeat(np.arange(n_out), idx.shape[1]), idx.reshape(-1)), weights.reshape(-1))
            moved = g.transpose(x, [a for a in range(rank) if a != axis] + [axis])
            y = g.matmul(moved, matrix.T.astype(x.dtype.np))
            x = g.transpose(y, list(range(axis)) + [rank - 1] + list(range(axis, rank - 1)))
        if outside is not None and outside.any():
            mask = outside.reshape([-1 if a == axis else 1 for a in range(rank)])
            x = g.where(mask, g.as_value(float(ctx.attr("extrapolation_value", 0.0)), x.dtype), x)
    return x


def _output_sizes(ctx, dims, axes, scales, sizes):
    """Output size and scale factor per resized axis (``keep_aspect_ratio_policy``
    applied to ``sizes``; ``scales`` give ``floor(scale * size)``)."""
    if sizes is not None:
        factors = [s / dims[a] for s, a in zip(sizes, axes)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            return sizes, factors
        if policy not in ("not_larger", "not_smaller"):
            raise ctx.error(f"keep_aspect_ratio_policy {policy!r}")
        common = min(factors) if policy == "not_larger" else max(factors)
        return [int(common * dims[a] + 0.5) for a in axes], [common] * len(axes)
    if scales is None:
        raise ctx.error("Resize needs scales or sizes")
    return [int(s * dims[a]) for s, a in zip(scales, axes)], scales


def _axis_taps(ctx, mode, n_in, n_out, factor, roi):
    """For each output position along one axis: the input positions it reads ``[out, n]``
    (clamped, i.e. edge padding), their weights ``[out, n]``, and which positions lie
    outside the crop window (``tf_crop_and_resize``; None otherwise)."""
    x_src, outside = _source_coordinates(ctx, np.arange(n_out, dtype=np.float64), n_in, n_out, factor, roi)
    base = np.floor(x_src)
    ratio = np.where(x_src == base, 1.0, x_src - base)  # in (0, 1]: the left pixel is preferred
    weights = _weights(ctx, mode, ratio, factor)
    n = weights.shape[1]
    # the n positions nearest to x_src (ties to the smaller), found on the edge-padded axis
    pad = math.ceil(n / 2)
    padded = x_src + pad
    p = np.floor(padded)
    frac = padded - p
    if n % 2 == 0:
        start = p + np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        start = p - (n - 1) // 2 + (frac > 0.5)
    idx = start[:, None].astype(np.int64) + np.arange(n)[None, :] - pad
    if ctx.attr("exclude_outside", 0):
        weights = np.where((idx < 0) | (idx >= n_in), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n_in - 1), weights, outside


def _source_coordinates(ctx, y, n_in, n_out, factor, roi):
    """``coordinate_transformation_mode``: output index -> input coordinate."""
    mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    scaled_len = factor * n_in
    if mode == "align_corners":
        return (np.zeros_like(y) if scaled_len == 1 else y * (n_in - 1) / (scaled_len - 1)), None
    if mode == "asymmetric":
        return y / factor, None
    if mode == "pytorch_half_pixel":
        return (np.full_like(y, -0.5) if scaled_len == 1 else (y + 0.5) / factor - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / factor - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / scaled_len)
        return offset + (y + 0.5) / factor - 0.5, None
    if mode == "tf_crop_and_resize":
        if roi is None:
            raise ctx.error("tf_crop_and_resize needs the roi input")
        start, end = roi
        x = (np.full_like(y, (end - start) * (n_in - 1) / 2) if scaled_len == 1
             else y * (end - start) * (n_in - 1) / (scaled_len - 1)) + start * (n_in - 1)
        return x, (x < 0) | (x > n_in - 1)
    raise ctx.error(f"unknown coordinate_transformation_mode {mode!r}")


def _weights(ctx, mode, ratio, factor):
    """Interpolation weights ``[out, n]`` for each position's ``ratio`` (ONNX's kernels;
    ``antialias`` widens linear and cubic kernels by 1/scale when downsampling)."""
    a = float(ctx.attr("cubic_coeff_a", -0.75))
    r = ratio[:, None]
    if mode == "nearest":
        rule = ctx.attr("nearest_mode", "round_prefer_floor")
        second = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                  "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool)}.get(rule)
        if second is None:
            raise ctx.error(f"unknown nearest_mode {rule!r}")
        second = np.where(ratio == 1.0, True, second)  # an integer coordinate is the position itself
        return np.stack([~second, second], axis=1).astype(np.float64)
    if ctx.attr("antialias", 0):
        scale = min(factor, 1.0)
        first = math.floor(-(1 if mode == "linear" else 2) / scale) + 1
        taps = np.arange(first, 2 - first)[None, :]
        args = np.abs((taps - r) * scale)
        kernel = np.clip(1 - args, 0, 1) if mode == "linear" else _cubic_kernel(args, a)
        return kernel / kernel.sum(axis=1, keepdims=True)
    if mode == "linear":
        return np.concatenate([1 - r, r], axis=1)
    return _cubic_kernel(np.abs(np.concatenate([r + 1, r, 1 - r, 2 - r], axis=1)), a)


def _cubic_kernel(d, a):
    """Keys' cubic convolution kernel with parameter ``a`` at distances ``d >= 0``."""
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


# --- grids ------------------------------------------------------------------------------
@onnx_op("AffineGrid")
@computed_in_f32
def affine_grid(ctx):
    """``theta [N, 2, 3]`` (or ``[N, 3, 4]``) times the homogeneous base grid of normalized
    coordinates in [-1, 1] -> ``[N, H, W, 2]`` (or ``[N, D, H, W, 3]``)."""
    g = ctx.g
    theta = ctx.input(0)
    size = ctx.const_ints(1)
    spatial = list(size[2:])
    align = bool(ctx.attr("align_corners", 0))
    axes = [_normalized_positions(n, align) for n in reversed(spatial)]  # x (width) first
    mesh = np.meshgrid(*axes[::-1], indexing="ij")[::-1]  # each [*spatial], x first
    base = np.stack(list(mesh) + [np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    grid = g.matmul(g.constant(base.astype(theta.dtype.np)), g.transpose(theta, [0, 2, 1]))
    return g.reshape(grid, [theta.dims[0]] + spatial + [len(spatial)])


def _normalized_positions(n, align_corners):
    if align_corners:
        return np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
    return (np.arange(n) * 2 + 1) / n - 1


@onnx_op("GridSample")
def grid_sample(ctx):
    """Sample ``X [N, C, *spatial]`` at ``grid [N, *out, n]`` (normalized coordinates in
    [-1, 1], x = the last spatial axis first), as ONNX (and torch) define it: each output
    reads the 1 (nearest), 2^n (linear) or 4^n (cubic) input positions around its
    coordinate, out-of-range positions handled by ``padding_mode`` (zeros, border,
    reflection); every position is one gather from the flattened input."""
    g = ctx.g
    x, grid = ctx.input(0), ctx.input(1)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.attr("mode", "linear"), ctx.attr("mode", "linear"))
    padding, align = ctx.attr("padding_mode", "zeros"), bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"mode {mode!r} / padding_mode {padding!r} (expected nearest|linear|cubic and "
                        f"zeros|border|reflection)")
    n, c, *spatial = x.dims
    nd = len(spatial)
    out_dims = grid.dims[1:-1]
    coords = []  # per spatial axis: the input coordinate of every output position [N, *out]
    for axis, size in enumerate(spatial):
        v = g.reshape(g.slice(grid, [nd - 1 - axis], [nd - axis], axes=[-1]), [n] + list(out_dims))
        v = (v + 1.0) * (0.5 * (size - 1)) if align else ((v + 1.0) * size - 1.0) * 0.5
        if mode == "nearest":
            v = g.round(v)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            v = g.min(g.max(v, 0.0), size - 1.0)
        elif padding == "reflection":
            v = _reflect(g, v, lo, hi)
        coords.append((v, size, lo, hi))
    taps = []  # per axis: [(index (float, whole), weight or None)]
    for v, size, lo, hi in coords:
        if mode == "nearest":
            taps.append([(g.cast(g.cast(v, DType.I64), v.dtype), None)])
            continue
        base = g.floor(v)
        t = v - base
        offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        weights = [1.0 - t, t] if mode == "linear" else _cubic_weights(g, t)
        taps.append([(base + float(o), w) for o, w in zip(offsets, weights)])
    x_flat = g.reshape(x, [n, c, int(np.prod(spatial))])
    positions = int(np.prod(out_dims))
    total = None
    for corner in np.ndindex(*(len(t) for t in taps)):
        flat, weight, inside = None, None, None
        for axis, k in enumerate(corner):
            idx, w = taps[axis][k]
            size, lo, hi = coords[axis][1:]
            if padding == "zeros":
                ok = g.logical_and(idx >= 0.0, idx <= size - 1.0)
                inside = ok if inside is None else g.logical_and(inside, ok)
                idx = g.min(g.max(idx, 0.0), size - 1.0)
            elif padding == "border":
                idx = g.min(g.max(idx, 0.0), size - 1.0)
            else:
                idx = g.cast(g.cast(_reflect(g, idx, lo, hi), DType.I64), idx.dtype)  # truncates, as ONNX
            term = g.cast(idx, DType.I64) * int(np.prod(spatial[axis + 1:]))
            flat = term if flat is None else flat + term
            weight = w if weight is None else (weight if w is None else weight * w)
        picked = g.gather_elements(x_flat, g.expand(g.reshape(flat, [n, 1, positions]), [n, c, positions]), axis=2)
        if weight is not None:
            picked = picked * g.reshape(weight, [n, 1, -1])
        if inside is not None:
            picked = g.where(g.reshape(inside, [n, 1, -1]), picked, g.as_value(0.0, x.dtype))
        total = picked if total is None else total + picked
    return g.reshape(total, [n, c] + list(out_dims))


def _reflect(g, v, lo: float, hi: float):
    """Reflect coordinates into [lo, hi] off the nearer border, as often as needed."""
    span = hi - lo
    if span <= 0:
        return g.min(g.max(v, lo), hi)
    below, above = lo - v, v - hi
    dist = g.max(below, above)  # > 0 outside
    flips = g.floor(dist / span)
    rest = dist - flips * span
    even = g.eq(g.mod(flips, 2.0), 0.0)
    from_low = g.where(even, lo + rest, hi - rest)   # v below lo
    from_high = g.where(even, hi - rest, lo + rest)  # v above hi
    return g.where(v < lo, from_low, g.where(v > hi, from_high, v))


def _cubic_weights(g, t, a=-0.75):
    """Keys' cubic weights (a = -0.75, torch's) of the taps at offsets -1, 0, 1, 2."""
    def near(d):
        return ((d * (a + 2) - (a + 3)) * d) * d + 1.0

    def far(d):
        return ((d * a - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]

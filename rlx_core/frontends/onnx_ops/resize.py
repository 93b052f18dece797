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


@onnx_op("Resize")
def resize(ctx):
    g = ctx.g
    x = ctx.input(0)
    rank = x.rank
    axes = [a % rank for a in ctx.attr("axes", range(rank))]
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

"""Reference kernels of the 'conv' family. Definitions are in ``rlx_core.ir.ops.conv``.

All three kernels walk the kernel taps: for tap ``t`` (one index per spatial axis),
``_tap_windows`` gives the strided slice of the (padded) input that the tap meets
across every output position. Convolution gathers through those slices, transposed
convolution scatters through them, pooling reduces over them.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops.conv import pool_geometry, sliding_output_size
from .kernels import kernel


def _tap_windows(kernel_dims, strides, dilations, positions):
    """Yield ``(tap, slices)``: the spatial slices that tap ``tap`` reads at each of
    ``positions`` (per axis: p*stride + tap*dilation for p < positions)."""
    for tap in np.ndindex(*kernel_dims):
        yield tap, tuple(slice(t * d, t * d + (n - 1) * s + 1, s)
                         for t, d, s, n in zip(tap, dilations, strides, positions))


def _pad_spatial(x, begin, end, value=0.0):
    """Pad the trailing ``len(begin)`` axes of ``x``."""
    lead = [(0, 0)] * (x.ndim - len(begin))
    return np.pad(x, lead + list(zip(begin, end)), constant_values=value)


def _spatial(lead, slices):
    return (slice(None),) * lead + tuple(slices)


@kernel("conv")
def conv(x, w, bias=None, *, strides, pads, dilations, groups):
    n, c = x.shape[:2]
    co, spatial = w.shape[0], x.ndim - 2
    padded = _pad_spatial(x, pads[:spatial], pads[spatial:])
    out_dims = tuple(sliding_output_size(size, k, s, d, 0, 0) for size, k, s, d in
                     zip(padded.shape[2:], w.shape[2:], strides, dilations))
    xg = padded.reshape((n, groups, c // groups) + padded.shape[2:])
    wg = w.reshape((groups, co // groups) + w.shape[1:])
    out = np.zeros((n, groups, co // groups) + out_dims, dtype=x.dtype)
    for tap, window in _tap_windows(w.shape[2:], strides, dilations, out_dims):
        out += np.einsum("ngc...,goc->ngo...", xg[_spatial(3, window)], wg[(...,) + tap])
    return _add_bias(out.reshape((n, co) + out_dims), bias)


@kernel("conv_transpose2d")
def conv_transpose2d(x, w, bias=None, *, strides, pads, dilations, output_padding, groups):
    n, ci = x.shape[:2]
    co_per_group, in_dims = w.shape[1], x.shape[2:]
    full_dims = tuple((size - 1) * s + (k - 1) * d + 1 + extra for size, k, s, d, extra in
                      zip(in_dims, w.shape[2:], strides, dilations, output_padding))
    xg = x.reshape((n, groups, ci // groups) + in_dims)
    wg = w.reshape((groups, ci // groups) + w.shape[1:])
    full = np.zeros((n, groups, co_per_group) + full_dims, dtype=x.dtype)
    for tap, window in _tap_windows(w.shape[2:], strides, dilations, in_dims):
        full[_spatial(3, window)] += np.einsum("ngc...,gco->ngo...", xg, wg[(...,) + tap])
    full = full.reshape((n, groups * co_per_group) + full_dims)
    crop = (slice(begin, size - end) for begin, end, size in zip(pads[:2], pads[2:], full_dims))
    return _add_bias(full[_spatial(2, crop)], bias)


def _add_bias(y, bias):
    return y if bias is None else y + bias.reshape((-1,) + (1,) * (y.ndim - 2))


@kernel("pool2d")
def pool2d(x, *, mode, kernel, strides, pads, dilations, count_include_pad, ceil_mode):
    in_dims = x.shape[2:]
    out_dims, end = pool_geometry(in_dims, kernel, strides, dilations, pads, ceil_mode)
    taps = list(_tap_windows(kernel, strides, dilations, out_dims))
    if mode == "max":
        padded = _pad_spatial(x, pads[:2], end, -np.inf)  # padding never wins
        return np.stack([padded[_spatial(2, window)] for _, window in taps]).max(axis=0)
    padded = _pad_spatial(x, pads[:2], end)
    counted = np.zeros(padded.shape[2:], dtype=x.dtype)  # 1 where a position counts in the divisor
    first, last = ((0, 0), tuple(size + pb + pe for size, pb, pe in zip(in_dims, pads[:2], pads[2:]))) \
        if count_include_pad else (tuple(pads[:2]), tuple(size + pb for size, pb in zip(in_dims, pads[:2])))
    counted[tuple(slice(f, l) for f, l in zip(first, last))] = 1
    total = sum(padded[_spatial(2, window)] for _, window in taps)
    count = sum(counted[window] for _, window in taps)
    return total / count

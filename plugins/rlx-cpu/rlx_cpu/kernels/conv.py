"""Convolution as im2col (numba) + one BLAS matmul per image; pooling in numba.

The matmul runs "channels last": ``[Ho*Wo, K] @ [K, Co]`` (the column matrix read
transposed), which BLAS computes 1.4-1.8x faster than ``[Co, K] @ [K, Ho*Wo]`` for the
few output channels of small CNNs. Its result, in scratch, is handed on as an NCHW
view; the bias and a fused epilogue read it from there while writing the output. With
channel groups, each group is one ``[Co/g, K] @ [K, Ho*Wo]`` matmul into the output.

A 1-D convolution is the 2-D one with a height of 1. A 1x1 convolution with unit
strides and no padding needs no im2col: its input already is the column matrix.
"""
from __future__ import annotations

import numpy as np

from rlx_core import DType, Graph, Node, Shape

from ..jit import generated_kernel, library, specialize
from ..jit.codegen import pool_source
from . import Bound, Call, kernel

__all__ = ["conv_calls", "conv_scratch", "result_in_scratch"]

_FAST = frozenset({DType.F32, DType.F64})


def _as_2d(node: Node) -> dict:
    """The conv's geometry as 2-D attributes (a 1-D conv gets a height-1 axis)."""
    a = node.attrs
    if len(a["strides"]) == 2:
        return dict(strides=a["strides"], pads=a["pads"], dilations=a["dilations"])
    return dict(strides=(1,) + a["strides"], pads=(0, a["pads"][0], 0, a["pads"][1]),
                dilations=(1,) + a["dilations"])


def _needs_im2col(node: Node, graph: Graph) -> bool:
    w = graph.shape_of(node.inputs[1]).dims
    geometry = _as_2d(node)
    return any(k != 1 for k in w[2:]) or any(s != 1 for s in geometry["strides"]) or any(geometry["pads"])


def result_in_scratch(node: Node, graph: Graph) -> bool:
    """Whether ``conv_calls`` leaves the result in its scratch (channels last) rather
    than in ``out``."""
    return node.shape.dtype in _FAST and _needs_im2col(node, graph) and node.attrs["groups"] == 1


def conv_scratch(node: Node, graph: Graph) -> list[Shape]:
    """The column matrix of one image and group ``[C/groups * kh * kw, Ho * Wo]``, and
    for channels-last matmuls the result ``[N, Ho * Wo, Co]``."""
    if node.shape.dtype not in _FAST or not _needs_im2col(node, graph):
        return []
    w = graph.shape_of(node.inputs[1]).dims
    n, co, positions = node.shape.dims[0], node.shape.dims[1], int(np.prod(node.shape.dims[2:]))
    scratch = [Shape((int(np.prod(w[1:])), positions), node.shape.dtype)]
    if result_in_scratch(node, graph):
        scratch.append(Shape((n, positions, co), node.shape.dtype))
    return scratch


def _image_rows(a: np.ndarray) -> np.ndarray:
    """``[N, C, *spatial]`` as ``[N, C, H, W]`` (height 1 for 1-D)."""
    return a if a.ndim == 4 else np.reshape(a, a.shape[:2] + (1,) + a.shape[2:], copy=False)


def conv_calls(node: Node, x: np.ndarray, w: np.ndarray, out: np.ndarray | None, scratch: list[np.ndarray]
               ) -> tuple[list[Call], np.ndarray]:
    """Calls computing ``conv(x, w)`` (no bias), and the array that then holds it: a
    view of the scratch (``result_in_scratch``) or ``out``."""
    geometry = _as_2d(node)
    groups = node.attrs["groups"]
    x4, w4 = _image_rows(x), _image_rows(w)
    n, co = node.shape.dims[:2]
    out_h, out_w = (1,) + node.shape.dims[2:] if len(node.shape.dims) == 3 else node.shape.dims[2:]
    positions = out_h * out_w
    weights = np.reshape(w4, (groups, co // groups, -1), copy=False)
    c_group = x4.shape[1] // groups
    if not scratch:  # 1x1, unit strides, no padding
        results = np.reshape(_image_rows(out), (n, groups, co // groups, positions), copy=False)
        inputs = np.reshape(x4, (n, groups, c_group, positions), copy=False)
        return [Call(np.matmul, (weights[g], inputs[i, g]), {"out": results[i, g]})
                for i in range(n) for g in range(groups)], out
    cols = scratch[0]
    (sh, sw), (ph, pw, _, _), (dh, dw) = geometry["strides"], geometry["pads"], geometry["dilations"]
    kh, kw = w4.shape[2:]
    calls = []
    channels_last = len(scratch) > 1
    results = scratch[1] if channels_last else np.reshape(_image_rows(out), (n, groups, co // groups, positions),
                                                          copy=False)
    for i in range(n):
        for g in range(groups):
            args = (x4[i, g * c_group:(g + 1) * c_group], cols, kh, kw, sh, sw, ph, pw, dh, dw, out_w)
            calls.append(Call(specialize(library().im2col, *args), args))
            if channels_last:
                calls.append(Call(np.matmul, (cols.T, weights[0].T), {"out": results[i]}))
            else:
                calls.append(Call(np.matmul, (weights[g], cols), {"out": results[i, g]}))
    if not channels_last:
        return calls, out
    return calls, np.reshape(results.transpose(0, 2, 1), node.shape.dims, copy=False)


@kernel("conv", scratch=lambda step, graph: conv_scratch(step.node, graph))
def conv_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    out = b.outs[0]
    calls, result = conv_calls(node, b.ins[0], b.ins[1], out, b.scratch)
    if len(b.ins) > 2:
        bias = b.ins[2].reshape((-1,) + (1,) * (out.ndim - 2))
        calls.append(Call(np.add, (result, bias), {"out": out}))
    elif result is not out:
        calls.append(Call(np.copyto, (out, result)))
    return calls


@kernel("pool2d")
def pool_step(b: Bound):
    """Windows inside the input: a kernel with the geometry as constants; else (padding,
    ceil mode's partial windows) the general kernel."""
    node, x, y = b.node, b.ins[0], b.outs[0]
    if node.shape.dtype not in _FAST:
        return None
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["kernel"], a["strides"], a["dilations"]
    ph, pw, ph_end, pw_end = a["pads"]
    if y.size == 0:
        return []
    inside = not any(a["pads"]) and (y.shape[2] - 1) * sh + (kh - 1) * dh < x.shape[2] \
        and (y.shape[3] - 1) * sw + (kw - 1) * dw < x.shape[3]
    if inside:
        source = pool_source(a["mode"] == "max", a["kernel"], a["strides"], a["dilations"], node.shape.dtype)
        return Call(specialize(generated_kernel(source), x, y), (x, y))
    args = (x, y, a["mode"] == "max", kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end, a["count_include_pad"])
    return Call(specialize(library().pool2d, *args), args)

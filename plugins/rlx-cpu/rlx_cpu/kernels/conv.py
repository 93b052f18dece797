"""Convolution as im2col (numba) + one BLAS matmul per image and group; pooling in numba.

A 1-D convolution is the 2-D one with a height of 1. A 1x1 convolution with unit
strides and no padding needs no im2col: its input already is the column matrix.
"""
from __future__ import annotations

import numpy as np

from rlx_core import DType, Graph, Node, Shape

from ..jit import library, specialize
from ..schedule import Step
from . import Bound, Call, kernel

__all__ = ["conv_calls", "conv_scratch"]

_FAST = frozenset({DType.F32, DType.F64})


def _as_2d(node: Node) -> dict:
    """The conv's geometry as 2-D attributes (a 1-D conv gets a height-1 axis)."""
    a = node.attrs
    if len(a["strides"]) == 2:
        return dict(strides=a["strides"], pads=a["pads"], dilations=a["dilations"])
    return dict(strides=(1,) + a["strides"], pads=(0, a["pads"][0], 0, a["pads"][1]),
                dilations=(1,) + a["dilations"])


def _needs_im2col(w_dims, geometry) -> bool:
    return tuple(w_dims[2:]) != (1,) * (len(w_dims) - 2) or any(s != 1 for s in geometry["strides"]) \
        or any(geometry["pads"])


def conv_scratch(node: Node, graph: Graph) -> list[Shape]:
    """The column matrix of one image and group: [C/groups * kh * kw, Ho * Wo]."""
    w = graph.shape_of(node.inputs[1])
    if node.shape.dtype not in _FAST or not _needs_im2col(w.dims, _as_2d(node)):
        return []
    taps = int(np.prod(w.dims[1:]))
    return [Shape((taps, int(np.prod(node.shape.dims[2:]))), node.shape.dtype)]


def _image_rows(a: np.ndarray) -> np.ndarray:
    """``[N, C, *spatial]`` as ``[N, C, H, W]`` (height 1 for 1-D)."""
    return a if a.ndim == 4 else np.reshape(a, a.shape[:2] + (1,) + a.shape[2:], copy=False)


def conv_calls(node: Node, x: np.ndarray, w: np.ndarray, out: np.ndarray, scratch: list[np.ndarray]) -> list[Call]:
    """``out = conv(x, w)`` without the bias (see the module docstring)."""
    geometry = _as_2d(node)
    groups = node.attrs["groups"]
    x4, w4, out4 = _image_rows(x), _image_rows(w), _image_rows(out)
    n, co = out4.shape[:2]
    per_group = co // groups
    positions = out4.shape[2] * out4.shape[3]
    weights = np.reshape(w4, (groups, per_group, -1), copy=False)
    results = np.reshape(out4, (n, groups, per_group, positions), copy=False)
    calls = []
    if not _needs_im2col(w.shape, geometry):
        inputs = np.reshape(x4, (n, groups, x4.shape[1] // groups, positions), copy=False)
        return [Call(np.matmul, (weights[g], inputs[i, g]), {"out": results[i, g]})
                for i in range(n) for g in range(groups)]
    cols = scratch[0]
    (sh, sw), (ph, pw, _, _), (dh, dw) = geometry["strides"], geometry["pads"], geometry["dilations"]
    kh, kw = w4.shape[2:]
    c_group = x4.shape[1] // groups
    for i in range(n):
        for g in range(groups):
            args = (x4[i, g * c_group:(g + 1) * c_group], cols, kh, kw, sh, sw, ph, pw, dh, dw, out4.shape[3])
            calls.append(Call(specialize(library().im2col, *args), args))
            calls.append(Call(np.matmul, (weights[g], cols), {"out": results[i, g]}))
    return calls


@kernel("conv", scratch=lambda step, graph: conv_scratch(step.node, graph))
def conv_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    out = b.outs[0]
    calls = conv_calls(node, b.ins[0], b.ins[1], out, b.scratch)
    if len(b.ins) > 2:
        bias = b.ins[2].reshape((-1,) + (1,) * (out.ndim - 2))
        calls.append(Call(np.add, (out, bias), {"out": out}))
    return calls


@kernel("pool2d")
def pool_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["kernel"], a["strides"], a["dilations"]
    ph, pw, ph_end, pw_end = a["pads"]
    args = (b.ins[0], b.outs[0], a["mode"] == "max", kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end,
            a["count_include_pad"])
    return Call(specialize(library().pool2d, *args), args)

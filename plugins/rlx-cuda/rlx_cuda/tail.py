"""Host-driven steps: kinds run through CuPy's numpy-compatible library (real device
kernels: thrust sorts, cuSOLVER, cuFFT) and onnxruntime-mode rng. (Control flow, also
lowered to ``Host`` actions, runs through ``rlx_cuda.control``.)

Each follows its reference kernel line by line with ``cupy`` for ``numpy``, on values
widened the way the reference widens them: f16/bf16 in f32, and FFTs in double
precision (the reference transforms in complex128 and rounds once). Results are
copied into the step's arena outputs. These steps allocate temporaries from CuPy's
pool and may synchronize, so a graph containing one is not captured.
"""
from __future__ import annotations

import numpy as np
from rlx_core.ir import DType
from rlx_core.rng import draw

__all__ = ["host_step", "widen", "narrow"]


def widen(cp, arr, dtype: DType):
    """The values of a stored array in the type the reference computes them in."""
    if dtype is DType.BF16:
        return (arr.astype(cp.uint32) << 16).view(cp.float32)
    if dtype is DType.F16:
        return arr.astype(cp.float32)
    return arr


def narrow(cp, arr, dtype: DType):
    """``arr`` (a computed value) rounded to the storage of ``dtype``."""
    if dtype is DType.BF16:
        bits = arr.astype(cp.float32, order="C").view(cp.uint32)  # (0-d stays 0-d)
        rounded = (bits + cp.uint32(0x7FFF) + ((bits >> 16) & cp.uint32(1))) >> 16
        return cp.where(cp.isnan(arr), (bits >> 16) | cp.uint32(0x40), rounded).astype(cp.uint16)
    from .dtypes import storage_np
    return arr.astype(storage_np(dtype))


def host_step(exe, node, ins, outs) -> None:
    cp = exe.cp
    fn = _HOST[node.kind]
    dtypes = [exe.graph.shape_of(r).dtype for r in node.inputs]
    args = [widen(cp, a, dt) for a, dt in zip(ins, dtypes)]
    results = fn(exe, node, *args)
    for out, res, shape in zip(outs, results if isinstance(results, (list, tuple)) else [results], node.outputs):
        cp.copyto(out, narrow(cp, cp.asarray(res), shape.dtype).reshape(shape.dims))


def _cumsum(exe, node, x):
    cp, a = exe.cp, node.attrs
    t = cp.moveaxis(x, a["axis"], -1)
    if a["reverse"]:
        t = t[..., ::-1]
    if a["exclusive"]:
        t = cp.concatenate([cp.zeros_like(t[..., :1]), t[..., :-1]], axis=-1)
    out = cp.cumsum(t, axis=-1, dtype=x.dtype)
    if a["reverse"]:
        out = out[..., ::-1]
    return cp.moveaxis(out, -1, a["axis"])


def _topk(exe, node, x):
    cp, a = exe.cp, node.attrs
    axis = a["axis"]
    keys = x.astype(cp.uint8) if x.dtype == cp.bool_ else x
    if a["largest"]:  # stable ascending sort of the flipped axis, flipped back (see topk_order)
        order = keys.shape[axis] - 1 - cp.flip(cp.argsort(cp.flip(keys, axis), axis=axis), axis)
    else:
        order = cp.argsort(keys, axis=axis)  # CuPy sorts are stable (thrust stable_sort)
    idx = cp.take(order, cp.arange(a["k"]), axis=axis)
    if not a["sorted"]:
        idx = cp.sort(idx, axis=axis)
    return cp.take_along_axis(x, idx, axis=axis), idx.astype(cp.int64)


def _dense_solve(exe, node, a, b):
    cp = exe.cp
    from rlx_core.ir.ops.linalg import solve_rhs_is_vector
    vector = solve_rhs_is_vector(a.shape, b.shape)
    rhs = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    a = cp.ascontiguousarray(cp.broadcast_to(a, batch + a.shape[-2:]))
    rhs = cp.ascontiguousarray(cp.broadcast_to(rhs, batch + rhs.shape[-2:]))
    x = cp.linalg.solve(a, rhs)
    return x[..., 0] if vector else x


def _fft(exe, node, x):
    cp, a = exe.cp, node.attrs
    transform = cp.fft.ifft if a["inverse"] else cp.fft.fft
    return transform(x.astype(cp.complex128), n=a["n"], axis=a["axis"], norm=a["norm"])


def _rfft(exe, node, x):
    a = node.attrs
    return exe.cp.fft.rfft(x.astype(exe.cp.float64), n=a["n"], axis=a["axis"], norm=a["norm"])


def _irfft(exe, node, x):
    a = node.attrs
    return exe.cp.fft.irfft(x.astype(exe.cp.complex128), n=a["n"], axis=a["axis"], norm=a["norm"])


def _rng(exe, node, *like):
    a = node.attrs
    dist, (p, q) = ("uniform", (a["low"], a["high"])) if node.kind == "rng_uniform" else \
        ("normal", (a["mean"], a["scale"]))
    n = int(np.prod(a["dims"]))
    values = draw(exe.rng, dist, n, key=a["key"], seed=a["seed"], a=p, b=q, dtype=a["dtype"].np)
    return exe.cp.asarray(values.astype(np.float32) if a["dtype"].is_low_float else values)


_HOST = {"cumsum": _cumsum, "topk": _topk, "dense_solve": _dense_solve, "fft": _fft, "rfft": _rfft,
         "irfft": _irfft, "rng_uniform": _rng, "rng_normal": _rng}

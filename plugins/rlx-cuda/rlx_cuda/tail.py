"""Host-driven steps: kinds run through CuPy's numpy-compatible library (real device
kernels: thrust sorts, cuSOLVER, cuFFT), control flow, and onnxruntime-mode rng.

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


# --- control flow: bodies run as sub-executables on the device, under rng.fold_in(i) -----
def _run_body(exe, graph, args, iteration):
    sub = exe.subgraph(graph)
    sub.set_rng(exe.rng.fold_in(iteration))
    return [o.copy() for o in sub.run_device(args)]


def _truth(cp, flag) -> bool:
    return bool(cp.asnumpy(flag).reshape(()))


def _if(exe, node, cond, *operands):
    branch = node.attrs["then_branch"] if _truth(exe.cp, cond) else node.attrs["else_branch"]
    return _run_body(exe, branch, _stored(exe, node, operands), 0)


def _while(exe, node, *carried):
    a = node.attrs
    state, i = list(_stored(exe, node, carried)), 0
    while a["max_iterations"] is None or i < a["max_iterations"]:
        if not _truth(exe.cp, _run_body(exe, a["cond"], state, i)[0]):
            break
        state = _run_body(exe, a["body"], state, i)
        i += 1
    return _widened(exe, node, state)


def _scan(exe, node, *operands):
    cp, a = exe.cp, node.attrs
    nc = a["num_carry"]
    stored = _stored(exe, node, operands)
    carry, xs = list(stored[:nc]), stored[nc:]
    y_shapes = node.outputs[nc:]
    from .dtypes import storage_np
    ys = [cp.empty(s.dims, storage_np(s.dtype)) for s in y_shapes]
    length = xs[0].shape[0]
    for i, t in enumerate(range(length - 1, -1, -1) if a["reverse"] else range(length)):
        outs = _run_body(exe, a["body"], carry + [x[t] for x in xs], i)
        carry = outs[:nc]
        for y, y_t in zip(ys, outs[nc:]):
            y[t] = y_t
    return _widened(exe, node, carry + ys)


def _stored(exe, node, values):
    """Widened operands back in their storage form (what a sub-executable takes)."""
    return [narrow(exe.cp, v, exe.graph.shape_of(r).dtype)
            for v, r in zip(values, node.inputs[len(node.inputs) - len(values):])]


def _widened(exe, node, stored):
    return [widen(exe.cp, v, s.dtype) for v, s in zip(stored, node.outputs)]


def _if_result(fn):
    def run(exe, node, *args):
        return _widened(exe, node, fn(exe, node, *args))
    return run


_HOST = {"cumsum": _cumsum, "topk": _topk, "dense_solve": _dense_solve, "fft": _fft, "rfft": _rfft,
         "irfft": _irfft, "rng_uniform": _rng, "rng_normal": _rng, "if": _if_result(_if), "while": _while,
         "scan": _scan}

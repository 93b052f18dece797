"""Control flow: If, Loop and Scan on the IR's ``if``, ``while`` and ``scan``.

ONNX bodies read outer values implicitly; RLX bodies see only their inputs, so every
outer runtime value a body reads becomes an extra operand (for loops, a carried value
returned unchanged). An If whose condition is known at import time is inlined.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ..onnx import foldable, onnx_op


@onnx_op("If")
def if_(ctx):
    cond = ctx.const(0) if ctx.is_const(0) else None
    if cond is not None:
        return ctx.inline("then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch")
    captured = ctx.captures("then_branch", "else_branch")
    branches = []
    for name in ("then_branch", "else_branch"):
        body = ctx.begin_subgraph(name)
        body.capture(captured)
        branches.append(body.finish(body.convert()))
    outs = ctx.g.cond(ctx.input(0), branches[0], branches[1], [ctx.outer(n) for n in captured])
    return list(outs)


@onnx_op("Scan")
def scan(ctx):
    """Scan inputs are moved to axis 0 (and flipped for reverse directions), the IR scan
    runs forward, and each scan output is flipped back / moved to its output axis."""
    g = ctx.g
    n_scanned = ctx.attr("num_scan_inputs")
    operands = ctx.inputs()
    states, xs = operands[:len(operands) - n_scanned], operands[len(operands) - n_scanned:]
    in_axes = ctx.attr("scan_input_axes", [0] * n_scanned)
    in_dirs = ctx.attr("scan_input_directions", [0] * n_scanned)
    xs = [_flip0(g, x) if rev else x for x, rev in zip((_to_front(g, x, a) for x, a in zip(xs, in_axes)), in_dirs)]
    captured = ctx.captures("body")
    body = ctx.begin_subgraph("body")
    names = body.input_names
    for name, v in zip(names, states):
        body.input(name, v.dims, v.dtype)
    inner = body.capture(captured)
    for name, x in zip(names[len(states):], xs):
        body.input(name, x.dims[1:], x.dtype)
    outs = body.convert()
    body.finish(outs[:len(states)] + inner + outs[len(states):])
    results = g.op("scan", *states, *(ctx.outer(n) for n in captured), *xs, body=body.g,
                   num_carry=len(states) + len(captured))
    final, ys = list(results[:len(states)]), list(results[len(states) + len(captured):])
    out_axes = ctx.attr("scan_output_axes", [0] * len(ys))
    out_dirs = ctx.attr("scan_output_directions", [0] * len(ys))
    ys = [_from_front(g, _flip0(g, y) if rev else y, axis) for y, rev, axis in zip(ys, out_dirs, out_axes)]
    return final + ys


def _to_front(g, x, axis):
    axis = axis + x.rank if axis < 0 else axis
    return x if axis == 0 else g.transpose(x, [axis] + [i for i in range(x.rank) if i != axis])


def _from_front(g, y, axis):
    axis = axis + y.rank if axis < 0 else axis
    if axis == 0:
        return y
    perm = list(range(1, y.rank))
    perm.insert(axis, 0)
    return g.transpose(y, perm)


def _flip0(g, x):
    n = x.dims[0]
    return g.slice(x, [n - 1], [-n - 1], [-1], axes=[0]) if n else x


@onnx_op("Loop")
def loop(ctx):
    """A loop that provably runs its full trip count (``M`` known, the condition true and
    kept true by the body) becomes an IR ``scan`` over ``arange(M)``, scan outputs
    included; otherwise, without scan outputs, an IR ``while`` carrying the iteration
    number and the condition."""
    trip = ctx.const(0)
    trip = None if trip is None else int(np.asarray(trip).reshape(-1)[0])
    cond0 = ctx.const(1) if ctx.is_const(1) or not ctx.has(1) else None
    starts_true = not ctx.has(1) or (cond0 is not None and bool(np.asarray(cond0).reshape(-1)[0]))
    if trip is not None and starts_true:
        static = _loop_as_scan(ctx, trip)
        if static is not None:
            return static
    return _loop_as_while(ctx, trip)


def _loop_as_scan(ctx, trip: int):
    """The scan form, or None when the body may turn the condition false."""
    g = ctx.g
    carried = ctx.inputs()[2:]
    captured = ctx.captures("body")
    body = ctx.begin_subgraph("body")
    iter_name, cond_name, *names = body.input_names
    for name, v in zip(names, carried):
        body.input(name, v.dims, v.dtype)
    inner = body.capture(captured)
    body.input(iter_name, (), DType.I64)
    body.bind(cond_name, np.array(True))
    cond_out, *outs = body.convert()
    if not (isinstance(cond_out, np.ndarray) and bool(cond_out.reshape(-1)[0])):
        return None
    n = len(carried)
    body.finish(outs[:n] + inner + outs[n:])
    # The iteration numbers; above the folding limit a runtime arange (the memory plan judges it).
    steps = g.constant(np.arange(trip, dtype=np.int64)) if foldable((trip,), DType.I64) else \
        g.arange(trip, dtype=DType.I64)
    results = g.op("scan", *carried, *(ctx.outer(c) for c in captured), steps, body=body.g,
                   num_carry=n + len(captured))
    return list(results[:n]) + list(results[n + len(captured):])


def _loop_as_while(ctx, trip):
    g = ctx.g
    carried = ctx.inputs()[2:]
    captured = ctx.captures("body")
    cond0 = ctx.input(1) if ctx.has(1) else g.constant(np.array(True))
    init = [g.constant(np.array(0, np.int64)), g.reshape(cond0, [])] + carried + [ctx.outer(c) for c in captured]
    body = ctx.begin_subgraph("body")
    iter_name, cond_name, *names = body.input_names
    i = body.input(iter_name, (), DType.I64)
    body.input(cond_name, (), DType.BOOL)
    for name, v in zip(names, carried):
        body.input(name, v.dims, v.dtype)
    inner = body.capture(captured)
    cond_out, *outs = body.convert()
    if len(outs) > len(carried):
        raise ctx.unsupported("a Loop with scan outputs whose trip count is not known at import time "
                              "(RLX shapes are static)")
    bg = body.g
    as_value = (lambda v: v if not isinstance(v, np.ndarray) else bg.constant(v))
    body.finish([i + np.int64(1), bg.reshape(bg.cast(as_value(cond_out), DType.BOOL), [])] + outs + inner)
    cond_graph = _graph_returning(g, init, 1)
    results = g.op("while", *init, cond=cond_graph, body=body.g, max_iterations=trip)
    return list(results[2:2 + len(carried)])


def _graph_returning(g, operands, index):
    """A graph taking values shaped like ``operands`` that returns input ``index``."""
    from ...ir.graph import Graph
    sub = Graph(f"{g.name}/loop.cond")
    inputs = [sub.input(f"in{k}", v.dims, v.dtype) for k, v in enumerate(operands)]
    sub.set_outputs([inputs[index]])
    return sub

"""Lowerings of the control family (definitions: ``rlx_core.ir.ops.control``), driven
from the host: MLX has no device-side conditionals or loops.

A graph with a control node runs node by node (MLX still evaluates lazily, so the
work between two decisions is one evaluation); each subgraph is a function of its own,
compiled with ``mx.compile`` unless it has control nodes itself. The host waits for a
value only where a decision needs it: once per ``if`` (its condition) and once per
``while`` iteration (the loop condition); ``scan`` runs its static number of steps
without waiting. Each execution of a body runs under the seed folded with its
iteration, as the reference does (``ctx.run_subgraph(..., iteration)``).
"""
from __future__ import annotations

import mlx.core as mx

from . import lowering


def _truth(flag) -> bool:
    return bool(mx.reshape(flag, ()).item())  # the host waits here


@lowering("if", context=True, low_float=True)
def if_(ctx, cond, *operands, then_branch, else_branch):
    return ctx.run_subgraph(then_branch if _truth(cond) else else_branch, list(operands), 0)


@lowering("while", context=True, low_float=True)
def while_(ctx, *carried, cond, body, max_iterations):
    state, i = list(carried), 0
    while (max_iterations is None or i < max_iterations) and _truth(ctx.run_subgraph(cond, state, i)[0]):
        state = ctx.run_subgraph(body, state, i)
        i += 1
    return state


@lowering("scan", context=True, low_float=True)
def scan(ctx, *operands, body, num_carry, reverse):
    y_shapes = ctx.node.outputs[num_carry:]
    carry, xs = list(operands[:num_carry]), operands[num_carry:]
    length = xs[0].shape[0] if xs else 0
    steps: list[list] = [[None] * length for _ in y_shapes]
    for i, t in enumerate(range(length - 1, -1, -1) if reverse else range(length)):
        outs = ctx.run_subgraph(body, carry + [x[t] for x in xs], i)
        carry = outs[:num_carry]
        for column, y_t in zip(steps, outs[num_carry:]):
            column[t] = y_t
    from . import mx_dtype
    ys = [mx.stack(column) if length else mx.zeros(s.dims, mx_dtype(s.dtype)) for column, s in zip(steps, y_shapes)]
    return carry + ys

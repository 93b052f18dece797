"""Reference kernels of the 'control' family: subgraphs run through ``ctx.run_subgraph``
(the reference interpreter here; a backend's own executor when its context runs them)."""
from __future__ import annotations

import numpy as np

from .kernels import kernel


def run_body(ctx, graph, args, iteration: int) -> list[np.ndarray]:
    """Run ``graph`` on ``args`` (cast to its declared input dtypes) under
    ``ctx.rng.fold_in(iteration)``, as the control ops define."""
    args = [np.asarray(a).astype(n.attrs["dtype"].np, copy=False) for n, a in zip(graph.input_nodes, args)]
    return list(ctx.run_subgraph(graph, args, rng=ctx.rng.fold_in(iteration)))


def _truth(flag: np.ndarray) -> bool:
    return bool(np.asarray(flag).reshape(()))


@kernel("if", context=True)
def if_(ctx, cond, *operands, then_branch, else_branch):
    return run_body(ctx, then_branch if _truth(cond) else else_branch, operands, 0)


@kernel("while", context=True)
def while_(ctx, *carried, cond, body, max_iterations):
    state, i = list(carried), 0
    while (max_iterations is None or i < max_iterations) and _truth(run_body(ctx, cond, state, i)[0]):
        state = run_body(ctx, body, state, i)
        i += 1
    return state


@kernel("scan", context=True)
def scan(ctx, *operands, body, num_carry, reverse):
    y_shapes = ctx.node.outputs[num_carry:]
    carry, xs = list(operands[:num_carry]), operands[num_carry:]
    ys = [np.empty(s.dims, s.dtype.np) for s in y_shapes]
    length = xs[0].shape[0]
    for i, t in enumerate(range(length - 1, -1, -1) if reverse else range(length)):
        outs = run_body(ctx, body, carry + [x[t] for x in xs], i)
        carry = outs[:num_carry]
        for y, y_t in zip(ys, outs[num_carry:]):
            y[t] = y_t
    return carry + ys

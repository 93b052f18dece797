"""Lowerings of the control family (definitions: ``rlx_core.ir.ops.control``):
``if`` -> ``lax.cond``, ``while`` -> ``lax.while_loop``, ``scan`` -> ``lax.scan``.

Bodies are traced once into the program; the loops carry an iteration counter so that
each execution of a body runs under the random state folded with its iteration, as the
reference does (``ctx.run_subgraph(..., iteration)``).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from . import lowering

_COUNTER = np.uint64  # fold_in takes the iteration as a u64


@lowering("if", context=True, low_float=True)
def if_(ctx, cond, *operands, then_branch, else_branch):
    return lax.cond(jnp.reshape(cond, ()),
                    lambda ops: ctx.run_subgraph(then_branch, ops, 0),
                    lambda ops: ctx.run_subgraph(else_branch, ops, 0),
                    list(operands))


@lowering("while", context=True, low_float=True)
def while_(ctx, *carried, cond, body, max_iterations):
    def keep_going(state):
        i, values = state
        go = jnp.reshape(ctx.run_subgraph(cond, values, i)[0], ())
        return go if max_iterations is None else jnp.logical_and(i < max_iterations, go)

    def step(state):
        i, values = state
        return i + 1, ctx.run_subgraph(body, values, i)

    _, final = lax.while_loop(keep_going, step, (jnp.zeros((), _COUNTER), list(carried)))
    return final


@lowering("scan", context=True, low_float=True)
def scan(ctx, *operands, body, num_carry, reverse):
    def step(state, xs_t):
        i, carry = state
        outs = ctx.run_subgraph(body, [*carry, *xs_t], i)
        return (i + 1, outs[:num_carry]), outs[num_carry:]

    init = (jnp.zeros((), _COUNTER), list(operands[:num_carry]))
    (_, final), ys = lax.scan(step, init, list(operands[num_carry:]), reverse=reverse)
    return [*final, *ys]

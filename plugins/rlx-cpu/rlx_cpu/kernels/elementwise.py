"""Elementwise kinds as numpy ufuncs writing into their output buffer (no allocation)."""
from __future__ import annotations

import numpy as np

from rlx_core.reference.elementwise import cast_array
from . import kernel

# Kinds whose numpy ufunc has exactly the op's definition for every accepted dtype.
UFUNCS = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "atan": np.arctan, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil,
    "round": np.rint, "sign": np.sign, "logical_not": np.logical_not,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "atan2": np.arctan2, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}

def _direct(node, ins, outs) -> bool:
    """numpy computes f32/f64/int ops exactly as the reference does; 16-bit floats
    must be computed in f32 and rounded once, which a ufunc on f16 does not promise."""
    return all(a.dtype.kind != "f" or a.dtype.itemsize >= 4 for a in ins + outs) and \
        all(a.dtype.name != "bfloat16" for a in ins + outs)


@kernel(*UFUNCS)
def ufunc_step(node, ins, outs, ctx):
    from . import reference_step
    if not _direct(node, ins, outs):
        return reference_step(node, ins, outs, ctx)
    fn, out = UFUNCS[node.kind], outs[0]
    if len(ins) == 1:
        (a,) = ins
        return lambda: fn(a, out=out)
    a, b = ins
    return lambda: fn(a, b, out=out)


@kernel("cast")
def cast_step(node, ins, outs, ctx):
    (x,), (out,) = ins, outs
    to = node.attrs["to"]
    return lambda: np.copyto(out, cast_array(x, to), casting="unsafe")

"""Single elementwise nodes as one numpy call writing into the output buffer.

A numpy ufunc computes exactly what the op defines for 32/64-bit floats, integers,
bools and complex numbers. 16-bit floats must be computed in float32 and rounded
once, which a ufunc on float16/bfloat16 does not promise: those run the reference.
(Groups of several elementwise nodes become generated kernels: ``kernels.fused``.)
"""
from __future__ import annotations

import numpy as np

from rlx_core import Node

from . import Bound, Call, kernel

__all__ = ["UFUNCS", "direct_calls"]

# Kinds whose numpy ufunc has exactly the op's definition for every dtype it accepts.
UFUNCS = {
    "neg": np.negative, "abs": np.absolute, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "atan": np.arctan, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil,
    "round": np.rint, "sign": np.sign, "logical_not": np.logical_not,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "pow": np.power, "max": np.maximum,
    "min": np.minimum, "atan2": np.arctan2, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}


def _wide_enough(arrays) -> bool:
    return all(a.dtype.kind not in "fV" or a.dtype.itemsize >= 4 for a in arrays)


def direct_calls(node: Node, ins: list[np.ndarray], out: np.ndarray) -> list[Call] | None:
    """numpy calls computing ``node`` into ``out`` (one, or two for ``where``), or None."""
    if not _wide_enough(ins + [out]):
        return None
    if node.kind in UFUNCS:
        return [Call(UFUNCS[node.kind], tuple(ins), {"out": out})]
    if node.kind == "div" and out.dtype.kind in "fc":  # integers truncate: not true_divide
        return [Call(np.true_divide, tuple(ins), {"out": out})]
    if node.kind == "mod" and out.dtype.kind in "fiu":
        return [Call(np.fmod if node.attrs["fmod"] else np.remainder, tuple(ins), {"out": out})]
    if node.kind == "where":
        return [Call(np.copyto, (out, ins[2])), Call(np.copyto, (out, ins[1]), {"where": ins[0]})]
    if node.kind == "cast":
        return [_cast_call(ins[0], out)]
    return None


def _cast_call(x: np.ndarray, out: np.ndarray) -> Call:
    """``cast``: numpy's unsafe cast is the op's definition (truncation toward zero,
    wrapping, x != 0 for bool) once complex sources are reduced to their real part."""
    if x.dtype.kind == "c" and out.dtype.kind != "c":
        if out.dtype == np.bool_:
            return Call(np.not_equal, (x, 0), {"out": out})
        x = x.real
    return Call(np.copyto, (out, x), {"casting": "unsafe"})


@kernel(*UFUNCS, "div", "mod", "where", "cast")
def elementwise_step(b: Bound):
    return direct_calls(b.node, b.ins, b.outs[0])

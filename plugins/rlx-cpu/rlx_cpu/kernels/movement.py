"""Data movement that is not a view (see ``plan``): one numpy copy into the output."""
from __future__ import annotations

import numpy as np

from rlx_core import DType
from rlx_core.reference.elementwise import cast_array
from rlx_core.reference.movement import index_range_error

from ..plan import view_function
from . import Bound, Call, kernel


@kernel("reshape", "transpose", "slice", "split", "expand")
def copy_step(b: Bound):
    """The view the node describes, taken of the input and copied into each output."""
    x = b.ins[0]
    calls = []
    for index, out in enumerate(b.outs):
        src = view_function(b.node, index)(x) if b.node.kind != "reshape" else x
        dst = np.reshape(out, x.shape, copy=False) if b.node.kind == "reshape" else out
        calls.append(Call(np.copyto, (dst, src)))
    return calls


@kernel("concat")
def concat_step(b: Bound):
    return Call(np.concatenate, (tuple(b.ins),), {"axis": b.node.attrs["axis"], "out": b.outs[0]})


@kernel("gather")
def gather_step(b: Bound):
    """Host mode of the index ops: indices outside [-n, n) raise ``InputError``. They are
    checked first because numpy's mode="wrap" (which maps -n..-1 to n-1..0, as the op
    defines) wraps by repeated subtraction: an index of 2**62 would never return."""
    table, indices, axis = b.ins[0], b.ins[1], b.node.attrs["axis"]
    what = b.graph.describe(b.node)
    fixed = b.graph.nodes[b.node.inputs[1].node]
    if fixed.kind == "constant" and indices.ndim == 0 and index_range_error(what, indices, table.shape[axis],
                                                                           axis) is None:
        # one constant index (q/k/v picked from a packed projection): a copy of that slice,
        # where np.take would first copy a strided table whole
        return Call(np.copyto, (b.outs[0], table[(slice(None),) * axis + (int(indices) % table.shape[axis],)]))

    def check():
        error = index_range_error(what, indices, table.shape[axis], axis)
        if error is not None:
            raise error
    return [Call(check), Call(np.take, (table, indices), {"axis": axis, "out": b.outs[0], "mode": "wrap"})]


@kernel("pad")
def pad_step(b: Bound):
    """Constant padding: fill, then copy the (cropped) input into the interior."""
    a, x, out = b.node.attrs, b.ins[0], b.outs[0]
    if a["mode"] != "constant" or x.ndim == 0:
        return None
    before, after = a["pads"][0::2], a["pads"][1::2]
    cropped = x[tuple(slice(-min(lo, 0), n + min(hi, 0)) for n, lo, hi in zip(x.shape, before, after))]
    interior = out[tuple(slice(max(lo, 0), max(lo, 0) + n) for n, lo in zip(cropped.shape, before))]
    fill = cast_array(np.asarray(a["value"]), DType.of(x.dtype))
    return [Call(np.copyto, (out, fill)), Call(np.copyto, (interior, cropped))]

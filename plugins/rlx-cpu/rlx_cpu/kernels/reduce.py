"""Reductions as numpy ufunc reductions writing into their output buffer."""
from __future__ import annotations

import numpy as np

from . import Bound, Call, kernel

_REDUCERS = {"reduce_sum": np.add, "reduce_mean": np.add, "reduce_prod": np.multiply,
             "reduce_max": np.maximum, "reduce_min": np.minimum}


@kernel(*_REDUCERS)
def reduce_step(b: Bound):
    node, x, out = b.node, b.ins[0], b.outs[0]
    if x.dtype.kind in "fV" and x.dtype.itemsize < 4:  # 16-bit floats accumulate in float32
        return None
    a = node.attrs
    ufunc = _REDUCERS[node.kind]
    # dtype=x.dtype keeps integer sums and products in their own width (they wrap).
    kwargs = {"axis": a["axes"], "keepdims": a["keepdims"], "out": out}
    if node.kind in ("reduce_sum", "reduce_mean", "reduce_prod"):
        kwargs["dtype"] = x.dtype
    calls = [Call(ufunc.reduce, (x,), kwargs)]
    if node.kind == "reduce_mean":
        count = int(np.prod([x.shape[ax] for ax in a["axes"]]))
        calls.append(Call(np.true_divide, (out, count), {"out": out}))  # 0 / 0 = nan for an empty mean
    return calls

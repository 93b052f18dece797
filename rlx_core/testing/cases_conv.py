"""Conformance cases of the 'conv' family: conv, conv_transpose2d and pool2d."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import FLOATS, DType
from .cases import Case, spec

_DTYPES = sorted(FLOATS, key=lambda d: d.value)

# (name, x dims, w dims, with bias, attrs)
_CONVS = [
    ("2d/3x3/pad1", (2, 4, 7, 6), (5, 4, 3, 3), True, dict(pads=1)),
    ("1d", (2, 3, 10), (4, 3, 3), True, dict()),
    ("1d/stride2/dil2/asym-pad", (1, 2, 11), (3, 2, 3), False, dict(strides=2, dilations=2, pads=(2, 1))),
    ("2d/strides/dilations", (1, 3, 9, 10), (2, 3, 3, 2), True,
     dict(strides=(2, 3), dilations=(2, 1), pads=(1, 0, 2, 1))),
    ("2d/groups2", (2, 4, 6, 6), (6, 2, 3, 3), True, dict(groups=2, pads=(0, 1, 1, 0))),
    ("2d/depthwise", (1, 3, 5, 5), (3, 1, 3, 3), False, dict(groups=3, pads=1)),
    ("2d/1x1", (2, 8, 4, 4), (3, 8, 1, 1), True, dict()),
    ("2d/kernel=input", (1, 2, 3, 3), (2, 2, 3, 3), False, dict()),
    ("2d/empty-batch", (0, 2, 4, 4), (3, 2, 3, 3), True, dict(pads=1)),
    ("2d/long-sum", (1, 32, 6, 6), (4, 32, 3, 3), False, dict(pads=1)),
]

# (name, x dims, w dims, with bias, attrs)
_CONV_TRANSPOSES = [
    ("3x3", (2, 3, 4, 5), (3, 2, 3, 3), True, dict()),
    ("stride2/pad1/outpad1", (1, 2, 5, 4), (2, 3, 3, 3), True, dict(strides=2, pads=1, output_padding=1)),
    ("strides/dilations/asym", (1, 2, 3, 4), (2, 2, 2, 3), False,
     dict(strides=(3, 2), dilations=(2, 1), pads=(0, 1, 2, 0), output_padding=(1, 0))),
    ("groups2", (2, 4, 3, 3), (4, 3, 3, 2), True, dict(groups=2, strides=2)),
    ("1x1", (1, 3, 2, 2), (3, 1, 1, 1), False, dict()),
    ("empty-batch", (0, 2, 3, 3), (2, 2, 2, 2), False, dict()),
]

# (name, x dims, attrs)
_POOLS = [
    ("max/2x2", (2, 3, 6, 6), dict(mode="max", kernel=2)),
    ("avg/2x2", (2, 3, 6, 6), dict(mode="avg", kernel=2)),
    ("max/3x3/s1/pad1", (1, 2, 5, 5), dict(mode="max", kernel=3, strides=1, pads=1)),
    ("max/dilations/ceil", (1, 2, 8, 7), dict(mode="max", kernel=(2, 3), strides=(2, 2), dilations=(2, 2),
                                              pads=(1, 0, 0, 1), ceil_mode=True)),
    ("avg/pad/exclude", (1, 2, 5, 6), dict(mode="avg", kernel=3, strides=2, pads=(1, 1, 2, 1))),
    ("avg/pad/include", (1, 2, 5, 6), dict(mode="avg", kernel=3, strides=2, pads=(1, 1, 2, 1),
                                           count_include_pad=True)),
    ("avg/ceil/include", (1, 1, 7, 7), dict(mode="avg", kernel=3, strides=2, pads=1, ceil_mode=True,
                                            count_include_pad=True)),
    ("avg/ceil/exclude", (1, 1, 7, 8), dict(mode="avg", kernel=(3, 2), strides=(3, 3), ceil_mode=True)),
    ("max/ceil/no-window-in-end-pad", (1, 1, 5, 5), dict(mode="max", kernel=2, strides=2, pads=1, ceil_mode=True)),
    ("max/global", (2, 4, 3, 5), dict(mode="max", kernel=(3, 5))),
    ("avg/empty-batch", (0, 2, 4, 4), dict(mode="avg", kernel=2)),
]


def _with_weights(cases, dt, kind):
    for name, x_dims, w_dims, with_bias, attrs in (cases if dt is DType.F32 else cases[:1]):
        ins = {"x": spec(x_dims, dt), "w": spec(w_dims, dt, param=True)}
        if with_bias:
            ins["bias"] = spec((w_dims[0] if kind == "conv" else w_dims[1] * attrs.get("groups", 1),), dt)
        tol = 4 if "long-sum" in name else 1
        yield Case(f"{kind}/{name}", kind, dt, ins,
                   lambda g, x, w, bias=None, k=kind, a=attrs: getattr(g, k)(x, w, bias, **a), tol=tol)


def cases():
    for dt in _DTYPES:
        yield from _with_weights(_CONVS, dt, "conv")
        yield from _with_weights(_CONV_TRANSPOSES, dt, "conv_transpose2d")
        for name, x_dims, attrs in (_POOLS if dt is DType.F32 else _POOLS[:2]):
            yield Case(f"pool2d/{name}", "pool2d", dt, {"x": spec(x_dims, dt)},
                       lambda g, x, a=attrs: g.pool2d(x, **a))
    yield Case("pool2d/max/nan-and-inf", "pool2d", DType.F32,
               {"x": spec((1, 1, 2, 4), "f32", "values", values=[[np.nan, 1, -np.inf, -np.inf], [0, 2, -np.inf, 5]])},
               lambda g, x: g.pool2d(x, "max", 2))

"""Conformance cases of the 'nn' family: normalizations, attention and rope."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import FLOATS, DType
from ..ir.ops.nn import rope_tables
from .cases import Case, spec

_DTYPES = sorted(FLOATS, key=lambda d: d.value)


def _f32_only(variants, dt):
    """Every variant on f32, the first one on the other dtypes."""
    return variants if dt is DType.F32 else variants[:1]


# (name, x dims, axis, eps, with beta)
_NORMS = [("[2,3,8]", (2, 3, 8), -1, 1e-5, True), ("[2,3,8]/axis1", (2, 3, 8), 1, 1e-5, True),
          ("[2,3,8]/no-beta", (2, 3, 8), -2, 1e-5, False), ("[5]/eps0.1", (5,), 0, 0.1, True),
          ("[2,3,4]/axis0", (2, 3, 4), 0, 1e-5, True), ("[0,4]", (0, 4), -1, 1e-5, True)]


def _norm_cases():
    for kind in ("layer_norm", "rms_norm"):
        for dt in _DTYPES:
            for name, dims, axis, eps, with_beta in _f32_only(_NORMS, dt):
                normalized = dims[axis % len(dims):]
                ins = {"x": spec(dims, dt), "gamma": spec(normalized, dt, param=True)}
                if with_beta:
                    ins["beta"] = spec(normalized, dt, param=True)
                yield Case(f"{kind}{name}", kind, dt, ins,
                           lambda g, x, gamma, beta=None, k=kind, a=axis, e=eps:
                           getattr(g, k)(x, gamma, beta, axis=a, eps=e))
    yield Case("layer_norm/constant-row", "layer_norm", DType.F32,  # var = 0: y = beta
               {"x": spec((2, 4), "f32", "values", values=[[3, 3, 3, 3], [1, 2, 3, 4]])},
               lambda g, x: g.layer_norm(x, np.ones(4), np.arange(4.0)))
    yield Case("layer_norm/large-offset", "layer_norm", DType.F32,  # mean >> spread
               {"x": spec((3, 16), "f32", "uniform", low=1000, high=1001), "gamma": spec((16,), "f32")},
               lambda g, x, gamma: g.layer_norm(x, gamma), tol=20)


# (name, x dims, num_groups, eps)
_GROUP_NORMS = [("[2,6,4,4]/g3", (2, 6, 4, 4), 3, 1e-5), ("[2,4]/g2", (2, 4), 2, 1e-5),
                ("[2,6,5]/g6", (2, 6, 5), 6, 1e-5), ("[3,4,5]/g1/eps0.01", (3, 4, 5), 1, 0.01),
                ("[0,4,3]/g2", (0, 4, 3), 2, 1e-5)]


def _group_norm_cases():
    for dt in _DTYPES:
        for name, dims, groups, eps in _f32_only(_GROUP_NORMS, dt):
            ins = {"x": spec(dims, dt), "gamma": spec(dims[1:2], dt, param=True),
                   "beta": spec(dims[1:2], dt, param=True)}
            yield Case(f"group_norm{name}", "group_norm", dt, ins,
                       lambda g, x, gamma, beta, n=groups, e=eps: g.group_norm(x, gamma, beta, num_groups=n, eps=e))


def _attention_inputs(dt, b=2, hq=4, hkv=2, sq=5, sk=7, d=8, dv=6):
    return {"q": spec((b, hq, sq, d), dt), "k": spec((b, hkv, sk, d), dt), "v": spec((b, hkv, sk, dv), dt)}


def _attention_cases():
    for dt in _DTYPES:
        tol = 1 if dt is DType.F32 else 2
        for mode, attrs in (("none", {}), ("causal", {}), ("sliding", {"window": 3})):
            yield Case(f"attention/{mode}", "attention", dt, _attention_inputs(dt),
                       lambda g, q, k, v, m=mode, a=attrs: g.attention(q, k, v, m, **a), tol=tol)
        yield Case("attention/custom", "attention", dt, {**_attention_inputs(dt), "mask": spec((2, 1, 5, 7), "bool")},
                   lambda g, q, k, v, mask: g.attention(q, k, v, mask), tol=tol)
        yield Case("attention/bias", "attention", dt, {**_attention_inputs(dt), "bias": spec((5, 7), dt)},
                   lambda g, q, k, v, bias: g.attention(q, k, v, bias), tol=tol)
    f32 = DType.F32
    variants = [  # (name, input dims overrides, builder kwargs)
        ("mqa/softcap", dict(hq=3, hkv=1), dict(softcap=2.0)),
        ("scale/causal", dict(sq=7), dict(mask="causal", scale=0.5)),
        ("causal/decode", dict(sq=1, sk=9), dict(mask="causal")),
        ("causal/sk<sq", dict(sq=6, sk=3), dict(mask="causal")),  # first rows see no key: zeros
        ("sliding/w1", dict(), dict(mask="sliding", window=1)),
        ("sliding/w>sk", dict(), dict(mask="sliding", window=20, softcap=5.0)),
        ("empty-keys", dict(sk=0), dict()),
        ("empty-head-dim", dict(d=0), dict(mask="causal")),  # scores 0: the mean of the visible values
        ("empty-batch", dict(b=0), dict(mask="causal")),
        ("long", dict(b=1, hq=2, hkv=2, sq=16, sk=64, d=32), dict(mask="causal")),
    ]
    for name, dims, kwargs in variants:
        yield Case(f"attention/{name}", "attention", f32, _attention_inputs(f32, **dims),
                   lambda g, q, k, v, kw=kwargs: g.attention(q, k, v, **kw))
    yield Case("attention/custom-empty-rows", "attention", f32,
               {**_attention_inputs(f32, sq=3, sk=4),
                "mask": spec((3, 4), "bool", "values", values=[[0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]])},
               lambda g, q, k, v, mask: g.attention(q, k, v, mask))
    yield Case("attention/bias-neginf", "attention", f32,
               {**_attention_inputs(f32, sq=2, sk=3),
                "bias": spec((2, 1, 2, 3), "f32", "values", values=[[-np.inf, 0.5, 0.5], [-np.inf] * 3,
                                                                    [0.5, -np.inf, 1.0], [0, 0, 0]])},
               lambda g, q, k, v, bias: g.attention(q, k, v, bias, softcap=1.0))


def _rope_cases():
    for dt in _DTYPES:
        for style in ("half", "interleaved"):
            cos, sin = rope_tables(6, 8, dtype=dt)
            yield Case(f"rope[2,3,6,8]/{style}", "rope", dt, {"x": spec((2, 3, 6, 8), dt)},
                       lambda g, x, s=style, c=cos, si=sin: g.rope(x, c, si, style=s))
    f32 = DType.F32
    for style in ("half", "interleaved"):
        yield Case(f"rope/partial/{style}", "rope", f32,
                   {"x": spec((2, 5, 10), f32), "cos": spec((5, 3), f32), "sin": spec((5, 3), f32)},
                   lambda g, x, cos, sin, s=style: g.rope(x, cos, sin, style=s, n_rot=6))
    cos, sin = rope_tables(4, 6, theta=500.0, offset=17)
    yield Case("rope[4,6]/offset", "rope", f32, {"x": spec((4, 6), f32)}, lambda g, x: g.rope(x, cos, sin))
    yield Case("rope/n_rot0", "rope", f32, {"x": spec((3, 4), f32)},
               lambda g, x: g.rope(x, np.zeros((3, 0)), np.zeros((3, 0)), n_rot=0))
    yield Case("rope/empty", "rope", f32, {"x": spec((0, 2, 4), f32)},
               lambda g, x: g.rope(x, *rope_tables(2, 4)))


def cases():
    yield from _norm_cases()
    yield from _group_norm_cases()
    yield from _attention_cases()
    yield from _rope_cases()

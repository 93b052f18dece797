"""Random number ops: RandomNormal, RandomUniform and their ``*Like`` forms, on the IR's
``rng_normal`` / ``rng_uniform``. Run with ``RngOptions(mode="ort")`` to get
onnxruntime's numbers for the same ``seed``."""
from __future__ import annotations

import numpy as np

from ..onnx import onnx_dtype, onnx_op


def _rng_attrs(ctx) -> dict:
    """dtype (default: the template's, else f32) and seed (ONNX's float seed s is the
    integer ``int(float32(s))``, what onnxruntime converts it to)."""
    like = ctx.input(0) if ctx.op_type.endswith("Like") else None
    dtype = onnx_dtype(ctx.attr("dtype")) if "dtype" in ctx.attrs else (like.dtype if like is not None else None)
    seed = ctx.attr("seed")
    return {"like": like, "dims": None if like is not None else list(ctx.attr("shape")),
            "dtype": dtype, "seed": None if seed is None else int(np.float32(seed))}


@onnx_op("RandomNormal", "RandomNormalLike")
def random_normal(ctx):
    return ctx.g.rng_normal(mean=float(ctx.attr("mean", 0.0)), scale=float(ctx.attr("scale", 1.0)),
                            **_rng_attrs(ctx))


@onnx_op("RandomUniform", "RandomUniformLike")
def random_uniform(ctx):
    return ctx.g.rng_uniform(low=float(ctx.attr("low", 0.0)), high=float(ctx.attr("high", 1.0)),
                             **_rng_attrs(ctx))


@onnx_op("Bernoulli")
def bernoulli(ctx):
    """1 with probability ``p`` (the input), else 0: ``uniform < p`` -- ONNX's definition
    of the op as a function of RandomUniformLike. The numbers follow the run's rng
    mode; no mode reproduces onnxruntime's own Bernoulli kernel."""
    p = ctx.input(0)
    seed = ctx.attr("seed")
    u = ctx.g.rng_uniform(like=p, dtype=p.dtype, seed=None if seed is None else int(np.float32(seed)))
    return ctx.g.cast(u < p, onnx_dtype(ctx.attr("dtype")) if "dtype" in ctx.attrs else p.dtype)

"""Lowerings of the literal source ops: values the program embeds as constants.

``input`` and ``param`` are bound by the traced function's arguments instead.
"""
from __future__ import annotations

import jax.numpy as jnp

from rlx_core.reference import get_kernel

from . import lowering


@lowering("constant")
def constant(*, value):
    return jnp.asarray(value)


@lowering("arange")
def arange(**attrs):
    # The values depend on attributes only: the reference computes them on the host.
    return jnp.asarray(get_kernel("arange").fn(**attrs))

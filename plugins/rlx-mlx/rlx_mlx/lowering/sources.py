"""Lowerings of the literal source ops: values the program embeds as constants.

``input`` and ``param`` are bound by the traced function's arguments instead.
"""
from __future__ import annotations

from rlx_core.reference import get_kernel

from . import from_numpy, lowering


@lowering("constant", low_float=True)
def constant(*, value):
    return from_numpy(value)


@lowering("arange", low_float=True)
def arange(**attrs):
    # The values depend on attributes only: the reference computes them on the host.
    return from_numpy(get_kernel("arange").fn(**attrs))

"""CPU kernels: for each op kind, a *builder* that binds a node to its buffers.

``builder(node, ins, outs, ctx) -> step`` receives the node, its input arrays and its
preallocated output arrays (views into the arena, or persistent param/constant
buffers) and returns a zero-argument ``step()`` that computes the outputs in place.
All buffer lookups, attribute parsing and shape logic happen once, in the builder, so
that a run is a flat sequence of ``step()`` calls.

Kinds without a dedicated builder run their reference kernel and copy the result into
the output buffer (correct, but allocating); ``fallback_kinds()`` lists them.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from rlx_core.ir import Node
from rlx_core.reference import run_node

__all__ = ["KERNELS", "kernel", "build_step", "reference_step", "fallback_kinds"]

Step = Callable[[], None]
Builder = Callable[[Node, list, list, object], Step]
KERNELS: dict[str, Builder] = {}


def kernel(*kinds: str):
    """Register a builder for one or more op kinds."""
    def deco(builder: Builder) -> Builder:
        for k in kinds:
            KERNELS[k] = builder
        return builder
    return deco


def reference_step(node: Node, ins: list, outs: list, ctx) -> Step:
    def step():
        for dst, src in zip(outs, run_node(node, ins, ctx)):
            np.copyto(dst, src)
    return step


def build_step(node: Node, ins: list, outs: list, ctx) -> Step:
    return KERNELS.get(node.kind, reference_step)(node, ins, outs, ctx)


def fallback_kinds(kinds) -> list[str]:
    return sorted(k for k in kinds if k not in KERNELS)


from . import elementwise  # noqa: E402,F401  (registers builders)

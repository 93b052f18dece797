"""CPU kernels: for each step kind, a *builder* that binds a step to its buffers.

``builder(b: Bound) -> Call | list[Call]`` receives the step, its input arrays, its
preallocated output arrays (arena views, or persistent param/constant buffers) and its
scratch arrays, and returns the calls that compute the outputs in place. A
:class:`Call` is a function with its arguments already bound: the executable writes
the calls out as straight-line code, so all buffer lookups, attribute parsing and
shape logic happen once, in the builder.

Kinds without a dedicated builder (or cases a builder declines by returning None) run
their reference kernel and copy the result into the output buffers: correct, but
allocating. ``scratch`` functions tell the memory plan which temporaries a step needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from rlx_core import Graph, Node, Ref, Shape
from rlx_core.reference import run_node

from ..schedule import Step

__all__ = ["Call", "Bound", "kernel", "build_calls", "scratch_shapes", "reference_calls", "fallback_kinds",
           "KERNELS"]


class Call(NamedTuple):
    """``fn(*args, **kwargs)``: one statement of a compiled run. For BLAS calls
    (see ``rlx_cpu.threads``): ``threads``, the OpenBLAS thread count it runs with (0:
    OpenBLAS's own counts), and ``stall_after``, the seconds beyond which the run
    reports it as stalled."""

    fn: Callable
    args: tuple = ()
    kwargs: dict = {}
    threads: int | None = None
    stall_after: float | None = None


@dataclass
class Bound:
    """A step with the arrays it reads, writes and may use as scratch."""

    step: Step
    graph: Graph
    ins: list[np.ndarray]
    outs: list[np.ndarray]
    scratch: list[np.ndarray]
    ctx: Any

    @property
    def node(self) -> Node:
        return self.step.node


Builder = Callable[[Bound], "Call | list[Call] | None"]
KERNELS: dict[str, Builder] = {}
SCRATCH: dict[str, Callable[[Step, Graph], list[Shape]]] = {}


def kernel(*kinds: str, scratch: Callable[[Step, Graph], list[Shape]] | None = None):
    """Register a builder (and optionally its scratch function) for step kinds."""
    def deco(builder: Builder) -> Builder:
        for k in kinds:
            KERNELS[k] = builder
            if scratch is not None:
                SCRATCH[k] = scratch
        return builder
    return deco


def scratch_shapes(step: Step, graph: Graph) -> list[Shape]:
    fn = SCRATCH.get(step.kind)
    return fn(step, graph) if fn is not None else []


def reference_calls(b: Bound) -> list[Call]:
    """Run the step's nodes on their reference kernels and copy the results out
    (allocates on every run)."""
    step, ins, outs, ctx = b.step, b.ins, b.outs, b.ctx

    def run():
        values = dict(zip(step.inputs, ins))
        for node in step.nodes:
            for i, value in enumerate(run_node(node, [values[r] for r in node.inputs], ctx)):
                values[Ref(node.id, i)] = value
        for dst, ref in zip(outs, step.outputs):
            np.copyto(dst, values[ref])
    return [Call(run)]


def build_calls(b: Bound) -> list[Call]:
    """The calls computing ``b.step``: its builder's, else the reference kernel's."""
    builder = KERNELS.get(b.step.kind)
    built = builder(b) if builder is not None else None
    if built is None:
        return reference_calls(b)
    return [built] if isinstance(built, Call) else list(built)


def fallback_kinds(kinds) -> list[str]:
    """The kinds among ``kinds`` that always run their reference kernel."""
    return sorted(k for k in kinds if k not in KERNELS)


from . import control, conv, elementwise, fft, fused, linalg, movement, nn, reduce  # noqa: E402,F401  (register builders)

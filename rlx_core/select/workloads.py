"""Named benchmark graphs (``rlx bench``, the pick-accuracy sweep) and random feeds.

A workload name is ``kind:arg:arg``: ``chain:65536:8`` is a chain of 8 elementwise ops
on 65536-element vectors. :func:`workload_names` lists what the installed op kinds can
build; :func:`build` makes one; :func:`random_feeds` gives inputs and params for any graph.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import RlxError
from ..ir.graph import Graph
from ..ir.schema import all_schemas
from ..ir.shape import Shape

__all__ = ["build", "workload_names", "random_feeds", "sweep", "WORKLOADS"]

# The elementwise kinds a chain cycles through (cheap, transcendental, binary with a param).
_CHAIN_STEPS = ("mul", "tanh", "add", "sigmoid", "sub", "exp", "mul", "relu")


def _chain(n: str = "65536", length: str = "8") -> Graph:
    size, steps = int(n), int(length)
    g = Graph(f"chain-{size}x{steps}")
    x = g.input("x", Shape((size,), "f32"))
    w = g.param("w", Shape((size,), "f32"))
    y = x
    for i in range(steps):
        kind = _CHAIN_STEPS[i % len(_CHAIN_STEPS)]
        y = g.op(kind, y, w) if kind in ("mul", "add", "sub") else g.op(kind, y)
    g.set_outputs([y])
    return g


def _residual(n: str = "1024", width: str = "256") -> Graph:
    """A gated residual block of elementwise ops on an [n, width] activation."""
    rows, cols = int(n), int(width)
    g = Graph(f"residual-{rows}x{cols}")
    x = g.input("x", Shape((rows, cols), "f32"))
    gate, bias = g.param("gate", Shape((cols,), "f32")), g.param("bias", Shape((cols,), "f32"))
    h = g.gelu(x * gate + bias)
    g.set_outputs([x + g.sigmoid(gate) * h])
    return g


# name -> (builder, op kinds it needs, description)
WORKLOADS: dict[str, tuple[Callable[..., Graph], frozenset[str], str]] = {
    "chain": (_chain, frozenset(_CHAIN_STEPS), "chain:N:LEN  LEN elementwise ops on N-vectors"),
    "residual": (_residual, frozenset({"mul", "add", "gelu", "sigmoid"}),
                 "residual:N:W  gated residual block on an [N, W] activation"),
}


def workload_names() -> dict[str, str]:
    """Workloads the installed op kinds can build: name -> usage."""
    kinds = set(all_schemas())
    return {name: doc for name, (_, needs, doc) in WORKLOADS.items() if needs <= kinds}


def build(spec: str) -> Graph:
    """``"chain:65536:8"`` -> Graph. Unknown names or bad arguments raise RlxError."""
    name, *args = spec.strip().split(":")
    if name not in WORKLOADS:
        raise RlxError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    builder, needs, doc = WORKLOADS[name]
    missing = needs - set(all_schemas())
    if missing:
        raise RlxError(f"workload {name!r} needs op kinds not installed here: {', '.join(sorted(missing))}")
    try:
        return builder(*args)
    except (TypeError, ValueError) as e:
        raise RlxError(f"bad workload {spec!r} ({e}); usage: {doc}") from None


def random_feeds(graph: Graph, seed: int = 0) -> tuple[dict, dict]:
    """``(inputs, params)`` of the declared dims and dtypes, values in [-1, 1) (ints in [0, 8))."""
    rng = np.random.default_rng(seed)

    def value(node):
        dims, dtype = tuple(node.attrs["dims"]), node.attrs["dtype"]
        if dtype.is_bool:
            return rng.random(dims) < 0.5
        if dtype.is_int:
            return rng.integers(0, 8, dims).astype(dtype.np)
        data = rng.uniform(-1, 1, dims)
        if dtype.is_complex:
            data = data + 1j * rng.uniform(-1, 1, dims)
        return np.asarray(data).astype(dtype.np)

    return ({n.attrs["name"]: value(n) for n in graph.input_nodes},
            {n.attrs["name"]: value(n) for n in graph.param_nodes})


def sweep() -> list[str]:
    """The pick-accuracy sweep: every workload spec the installed op kinds can build."""
    specs = [f"chain:{n}:{length}" for n in (256, 65536, 1 << 20) for length in (4, 16)]
    specs += [f"residual:{n}:512" for n in (8, 512)]
    names = workload_names()
    return [s for s in specs if s.split(":")[0] in names]

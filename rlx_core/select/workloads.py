"""Named benchmark graphs (``rlx bench``, the pick-accuracy sweep) and random feeds.

A workload spec is ``name:arg:arg``: ``chain:65536:8`` is a chain of 8 elementwise ops
on 65536-element vectors, ``transformer:128:256:4`` a decoder block of 128 tokens,
width 256, 4 heads. :func:`workload_names` lists what the installed op kinds can
build; :func:`build` makes one; :func:`random_feeds` gives inputs and params for any graph.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import RlxError
from ..ir.graph import Graph
from ..ir.schema import all_schemas
from ..ir.shape import Shape

__all__ = ["build", "workload_names", "random_feeds", "sweep", "WORKLOADS", "SWEEP"]

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


def _matmul(n: str = "256") -> Graph:
    size = int(n)
    g = Graph(f"matmul-{size}")
    x = g.input("x", Shape((size, size), "f32"))
    w = g.param("w", Shape((size, size), "f32"))
    g.set_outputs([g.matmul(x, w)])
    return g


def _mlp(batch: str = "64", width: str = "256") -> Graph:
    """x + W2 gelu(W1 x + b1): a transformer MLP with a 4x hidden layer."""
    rows, d = int(batch), int(width)
    g = Graph(f"mlp-{rows}x{d}")
    x = g.input("x", Shape((rows, d), "f32"))
    w1, b1 = g.param("w1", Shape((d, 4 * d), "f32")), g.param("b1", Shape((4 * d,), "f32"))
    w2 = g.param("w2", Shape((4 * d, d), "f32"))
    g.set_outputs([x + g.matmul(g.gelu(g.matmul(x, w1) + b1), w2)])
    return g


def _transformer(seq: str = "128", width: str = "256", heads: str = "4") -> Graph:
    """A pre-norm decoder block: causal self-attention and a GELU MLP, both residual."""
    s, d, h = int(seq), int(width), int(heads)
    g = Graph(f"transformer-{s}x{d}h{h}")
    x = g.input("x", Shape((s, d), "f32"))
    p = {name: g.param(name, Shape(dims, "f32")) for name, dims in (
        ("ln1", (d,)), ("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)),
        ("ln2", (d,)), ("w1", (d, 4 * d)), ("w2", (4 * d, d)))}

    def heads_first(t):  # [S, D] -> [1, H, S, D/H]
        return g.transpose(g.reshape(t, (1, s, h, d // h)), (0, 2, 1, 3))

    y = g.layer_norm(x, p["ln1"])
    att = g.attention(heads_first(g.matmul(y, p["wq"])), heads_first(g.matmul(y, p["wk"])),
                      heads_first(g.matmul(y, p["wv"])), mask="causal")
    x = x + g.matmul(g.reshape(g.transpose(att, (0, 2, 1, 3)), (s, d)), p["wo"])
    y = g.layer_norm(x, p["ln2"])
    g.set_outputs([x + g.matmul(g.gelu(g.matmul(y, p["w1"])), p["w2"])])
    return g


def _fft(batch: str = "16", n: str = "4096") -> Graph:
    """Magnitude spectrum |rfft(x)| of a batch of real signals."""
    rows, length = int(batch), int(n)
    g = Graph(f"fft-{rows}x{length}")
    x = g.input("x", Shape((rows, length), "f32"))
    g.set_outputs([g.abs(g.rfft(x))])
    return g


# name -> (builder, op kinds it needs, description)
WORKLOADS: dict[str, tuple[Callable[..., Graph], frozenset[str], str]] = {
    "chain": (_chain, frozenset(_CHAIN_STEPS), "chain:N:LEN  LEN elementwise ops on N-vectors"),
    "residual": (_residual, frozenset({"mul", "add", "gelu", "sigmoid"}),
                 "residual:N:W  gated residual block on an [N, W] activation"),
    "matmul": (_matmul, frozenset({"matmul"}), "matmul:N  [N, N] @ [N, N]"),
    "mlp": (_mlp, frozenset({"matmul", "add", "gelu"}), "mlp:B:D  x + W2 gelu(W1 x + b1), hidden 4D"),
    "transformer": (_transformer, frozenset({"matmul", "add", "gelu", "layer_norm", "attention", "reshape",
                                             "transpose"}),
                    "transformer:S:D:H  pre-norm decoder block (causal attention + MLP)"),
    "fft": (_fft, frozenset({"rfft", "abs"}), "fft:B:N  |rfft| of B real signals of length N"),
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


SWEEP = ([f"matmul:{n}" for n in (16, 32, 64, 128, 256, 512, 1024, 2048)]
         + [f"chain:{n}:{length}" for n in (256, 65536, 1 << 20) for length in (4, 16)]
         + ["residual:8:512", "residual:512:512", "mlp:8:256", "mlp:256:512",
            "transformer:64:256:4", "transformer:256:512:8", "fft:16:1024", "fft:64:16384"])


def sweep() -> list[str]:
    """The pick-accuracy sweep (22 graphs): matmul 16..2048, elementwise chains, residual
    and MLP blocks, two transformer blocks, two FFTs -- those the installed kinds can build."""
    names = workload_names()
    return [s for s in SWEEP if s.split(":")[0] in names]

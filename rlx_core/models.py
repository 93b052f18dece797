"""Standard models: small, well-known graphs with deterministic weights.

Each function returns ``(graph, params)``: a Graph built with the public builder API
and a dict of numpy arrays for every param it declares (``compiled.set_params(params)``).
``example_inputs(graph)`` makes matching random inputs. They serve the demo, the
benchmarks of every backend and the cost-model sweeps, so that everyone measures the
same computation:

* ``mlp``: a multilayer perceptron (linear + relu, logits out), 784-512-512-10 by default.
* ``transformer_block``: one encoder layer exactly as torch's ``nn.TransformerEncoderLayer``
  computes it with ``batch_first=True, norm_first=False, activation="gelu"`` in eval
  mode (post-norm: ``x = LN1(x + MHA(x)); y = LN2(x + W2 gelu(W1 x))``).
* ``small_cnn``: three 3x3 conv + relu stages (max-pooling after the first two), a global
  average pool and a linear classifier, on ``[N, 3, H, W]``.
* ``elementwise_chain``: ``length`` elementwise ops in a row on one vector (what a
  runtime's per-op dispatch costs).

Weights use torch's default initialisation ranges (uniform in +-1/sqrt(fan_in)), so
activations stay in a realistic range; ``seed`` picks them.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .ir import DType, Graph, Value

__all__ = ["mlp", "transformer_block", "small_cnn", "elementwise_chain", "example_inputs", "MODELS"]

Params = dict[str, np.ndarray]


class _Weights:
    """Declares params on a graph and draws their values (torch's default init ranges)."""

    def __init__(self, graph: Graph, dtype: DType, seed: int):
        self.graph = graph
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)
        self.values: Params = {}

    def param(self, name: str, dims: tuple[int, ...], fan_in: int, value: float | None = None) -> Value:
        """A param of ``dims``: the constant ``value`` if given, else uniform in +-1/sqrt(fan_in)."""
        if value is None:
            bound = 1.0 / math.sqrt(fan_in)
            arr = self.rng.uniform(-bound, bound, dims)
        else:
            arr = np.full(dims, value)
        self.values[name] = arr.astype(self.dtype.np)
        return self.graph.param(name, dims, self.dtype)

    def linear(self, name: str, x: Value, n_in: int, n_out: int) -> Value:
        """``x @ W + b`` with ``W [n_in, n_out]`` (the transpose of torch's Linear.weight)."""
        w = self.param(f"{name}.w", (n_in, n_out), n_in)
        b = self.param(f"{name}.b", (n_out,), n_in)
        return x @ w + b


def mlp(batch: int = 64, sizes: tuple[int, ...] = (784, 512, 512, 10), dtype="f32", seed: int = 0
        ) -> tuple[Graph, Params]:
    """Input ``x [batch, sizes[0]]`` -> linear layers of ``sizes``, relu between them -> logits."""
    dt = DType.of(dtype)
    g = Graph(f"mlp{'-'.join(map(str, sizes))}_b{batch}")
    w = _Weights(g, dt, seed)
    h = g.input("x", (batch, sizes[0]), dt)
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        h = w.linear(f"fc{i}", h, n_in, n_out)
        if i < len(sizes) - 2:
            h = g.relu(h)
    g.set_outputs([h], ["logits"])
    return g, w.values


def transformer_block(batch: int = 1, seq: int = 128, d_model: int = 256, heads: int = 4, ffn: int = 1024,
                      dtype="f32", seed: int = 0, eps: float = 1e-5) -> tuple[Graph, Params]:
    """One post-norm encoder layer on ``x [batch, seq, d_model]`` (see the module docstring).

    Self-attention projects q, k and v with one packed ``[d_model, 3*d_model]`` matmul,
    splits heads (``[B, S, H, Dh] -> [B, H, S, Dh]``), runs the ``attention`` op with no
    mask and merges the heads back before the output projection.
    """
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    dt = DType.of(dtype)
    head_dim = d_model // heads
    g = Graph(f"encoder_d{d_model}_h{heads}_s{seq}_f{ffn}_b{batch}")
    w = _Weights(g, dt, seed)
    x = g.input("x", (batch, seq, d_model), dt)

    qkv = w.linear("attn.in", x, d_model, 3 * d_model)
    q, k, v = (g.transpose(part.reshape(batch, seq, heads, head_dim), (0, 2, 1, 3))
               for part in g.split(qkv, [d_model] * 3, axis=2))
    attended = g.attention(q, k, v)
    merged = g.transpose(attended, (0, 2, 1, 3)).reshape(batch, seq, d_model)
    x = _layer_norm(w, "ln1", x + w.linear("attn.out", merged, d_model, d_model), d_model, eps)

    hidden = g.gelu(w.linear("ffn.in", x, d_model, ffn))
    y = _layer_norm(w, "ln2", x + w.linear("ffn.out", hidden, ffn, d_model), d_model, eps)
    g.set_outputs([y], ["y"])
    return g, w.values


def _layer_norm(w: _Weights, name: str, x: Value, d: int, eps: float) -> Value:
    gamma = w.param(f"{name}.gamma", (d,), d, value=1.0)
    beta = w.param(f"{name}.beta", (d,), d, value=0.0)
    return w.graph.layer_norm(x, gamma, beta, eps=eps)


def small_cnn(batch: int = 1, channels: int = 3, size: int = 64, widths: tuple[int, int, int] = (16, 32, 64),
              classes: int = 10, dtype="f32", seed: int = 0) -> tuple[Graph, Params]:
    """``x [batch, channels, size, size]`` -> 3 x (conv 3x3 pad 1 + bias + relu), 2x2 max-pool
    after the first two -> global average pool -> linear -> logits ``[batch, classes]``."""
    dt = DType.of(dtype)
    g = Graph(f"cnn{'-'.join(map(str, widths))}_{size}px_b{batch}")
    w = _Weights(g, dt, seed)
    h = g.input("x", (batch, channels, size, size), dt)
    c_in = channels
    for i, c_out in enumerate(widths):
        fan_in = c_in * 9
        kernel = w.param(f"conv{i}.w", (c_out, c_in, 3, 3), fan_in)
        bias = w.param(f"conv{i}.b", (c_out,), fan_in)
        h = g.relu(g.conv(h, kernel, bias, pads=1))
        if i < len(widths) - 1:
            h = g.pool2d(h, "max", 2)
        c_in = c_out
    pooled = g.mean(h, axes=(2, 3))
    g.set_outputs([w.linear("fc", pooled, c_in, classes)], ["logits"])
    return g, w.values


# The chain: (op kind, scalar second operand or None), applied in turn. Every value stays
# finite and of order 1 for inputs in [-1, 1).
_CHAIN: tuple[tuple[str, float | None], ...] = (
    ("mul", 1.5), ("add", 0.25), ("tanh", None), ("sub", 0.5), ("sigmoid", None), ("mul", 2.0),
    ("exp", None), ("neg", None), ("abs", None), ("sqrt", None), ("add", 1.0), ("log", None),
    ("relu", None), ("mul", 0.75), ("tanh", None), ("max", 0.1),
)


def elementwise_chain(n: int = 256, length: int = 16, dtype="f32") -> tuple[Graph, Params]:
    """``length`` elementwise ops (cycling through the 16 unary and scalar-binary ops of
    ``_CHAIN``) on ``x [n]``; no params."""
    dt = DType.of(dtype)
    g = Graph(f"chain{length}_n{n}")
    y = g.input("x", (n,), dt)
    for i in range(length):
        kind, operand = _CHAIN[i % len(_CHAIN)]
        builder = getattr(g, kind)
        y = builder(y) if operand is None else builder(y, operand)
    g.set_outputs([y], ["y"])
    return g, {}


def example_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every input of ``graph``: uniform in [-1, 1) for floats, small
    non-negative integers for integer inputs, fair coins for bools."""
    rng = np.random.default_rng(seed)
    out = {}
    for node in graph.input_nodes:
        dims, dt = tuple(node.attrs["dims"]), node.attrs["dtype"]
        if dt.is_bool:
            arr = rng.random(dims) < 0.5
        elif dt.is_int:
            arr = rng.integers(0, 8, dims)
        else:
            arr = rng.uniform(-1.0, 1.0, dims)
        out[node.attrs["name"]] = np.asarray(arr).astype(dt.np)
    return out


# name -> builder, with the benchmark configurations as defaults.
MODELS: dict[str, Callable[..., tuple[Graph, Params]]] = {
    "mlp": mlp, "transformer_block": transformer_block, "small_cnn": small_cnn,
    "elementwise_chain": elementwise_chain,
}

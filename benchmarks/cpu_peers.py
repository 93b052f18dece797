"""The benchmark models as the peers run them: an ONNX graph for onnxruntime, a jitted
JAX function and plain numpy calls -- each translated node by node from the same RLX
graph and weights, so every runtime computes exactly the same thing.

Only the op kinds of ``rlx_core.models`` are translated; anything else raises. Each
``*_runner(graph, params, threads)`` returns ``run(inputs) -> list of arrays``.
"""
from __future__ import annotations

import math
import os
from typing import Callable

import numpy as np

from rlx_core import Graph, Node, Ref

__all__ = ["onnx_model", "onnxruntime_runner", "jax_runner", "numpy_runner", "PEERS"]

Runner = Callable[[dict], list]


# --- ONNX ---------------------------------------------------------------------------------
ONNX_OPSET = 20  # Gelu arrived in opset 20
_ONNX_SIMPLE = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "max": "Max", "min": "Min",
                "matmul": "MatMul", "relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "exp": "Exp",
                "neg": "Neg", "abs": "Abs", "sqrt": "Sqrt", "log": "Log", "gelu": "Gelu"}


class _OnnxBuilder:
    """Collects ONNX nodes and initializers while walking an RLX graph."""

    def __init__(self, graph: Graph, params: dict):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.graph, self.params = graph, params
        self.nodes, self.inits, self.inputs = [], [], []

    def name(self, ref: Ref) -> str:
        return f"v{ref.node}_{ref.index}"

    def const(self, tag: str, value) -> str:
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), tag))
        return tag

    def add(self, op: str, ins: list[str], outs: list[str], **attrs) -> None:
        self.nodes.append(self.helper.make_node(op, ins, outs, **attrs))

    def node(self, n: Node) -> None:
        ins, outs = [self.name(r) for r in n.inputs], [self.name(Ref(n.id, i)) for i in range(len(n.outputs))]
        a = n.attrs
        if n.kind == "input":
            self.inputs.append(self.helper.make_tensor_value_info(outs[0], _onnx_type(n), list(a["dims"])))
        elif n.kind == "param":
            self.const(outs[0], self.params[a["name"]])
        elif n.kind == "constant":
            self.const(outs[0], a["value"])
        elif n.kind in _ONNX_SIMPLE:
            self.add(_ONNX_SIMPLE[n.kind], ins, outs)
        elif n.kind == "reshape":
            self.add("Reshape", [ins[0], self.const(f"{outs[0]}.shape", np.array(a["dims"], np.int64))], outs)
        elif n.kind == "transpose":
            self.add("Transpose", ins, outs, perm=list(a["perm"]))
        elif n.kind == "split":
            self.add("Split", [ins[0], self.const(f"{outs[0]}.split", np.array(a["sizes"], np.int64))], outs,
                     axis=a["axis"])
        elif n.kind == "layer_norm":
            self.add("LayerNormalization", ins, outs, axis=a["axis"], epsilon=a["eps"])
        elif n.kind == "reduce_mean":
            self.add("ReduceMean", [ins[0], self.const(f"{outs[0]}.axes", np.array(a["axes"], np.int64))], outs,
                     keepdims=int(a["keepdims"]))
        elif n.kind == "conv":
            self.add("Conv", ins, outs, strides=list(a["strides"]), pads=list(a["pads"]),
                     dilations=list(a["dilations"]), group=a["groups"])
        elif n.kind == "pool2d" and a["mode"] == "max":
            self.add("MaxPool", ins, outs, kernel_shape=list(a["kernel"]), strides=list(a["strides"]),
                     pads=list(a["pads"]), dilations=list(a["dilations"]), ceil_mode=int(a["ceil_mode"]))
        elif n.kind == "attention" and a["mask"] == "none" and a["softcap"] is None \
                and n.shape.dims[1] == self.graph.shape_of(n.inputs[1]).dims[1]:
            self.attention(ins, outs[0], a["scale"])
        else:
            raise NotImplementedError(f"no ONNX translation for {n.label} {dict(a)}")

    def attention(self, ins: list[str], out: str, scale: float) -> None:
        """softmax(scale q k^T) v, as torch.onnx exports scaled_dot_product_attention."""
        q, k, v = ins
        self.add("Transpose", [k], [f"{out}.kt"], perm=[0, 1, 3, 2])
        self.add("MatMul", [q, f"{out}.kt"], [f"{out}.qk"])
        self.add("Mul", [f"{out}.qk", self.const(f"{out}.scale", np.float32(scale))], [f"{out}.s"])
        self.add("Softmax", [f"{out}.s"], [f"{out}.p"], axis=-1)
        self.add("MatMul", [f"{out}.p", v], [out])


def _onnx_type(node: Node) -> int:
    from onnx import helper
    return helper.np_dtype_to_tensor_dtype(node.attrs["dtype"].np)


def onnx_model(graph: Graph, params: dict):
    """The ONNX ModelProto computing ``graph`` with ``params`` baked in as initializers."""
    from onnx import checker, helper
    b = _OnnxBuilder(graph, params)
    for n in graph.nodes:
        b.node(n)
    outputs = [helper.make_tensor_value_info(b.name(r), helper.np_dtype_to_tensor_dtype(s.dtype.np), list(s.dims))
               for r, s in zip(graph.outputs, graph.output_shapes)]
    model = helper.make_model(helper.make_graph(b.nodes, graph.name, b.inputs, outputs, b.inits),
                              opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    checker.check_model(model)
    return model


def onnxruntime_runner(graph: Graph, params: dict, threads: int) -> Runner:
    """An onnxruntime CPU session (all graph optimisations, ``threads`` intra-op threads)."""
    import onnxruntime as ort
    ort.set_default_logger_severity(3)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(onnx_model(graph, params).SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    names = {n.attrs["name"]: f"v{n.id}_0" for n in graph.input_nodes}
    run = session.run
    return lambda inputs: run(None, {names[k]: v for k, v in inputs.items()})


# --- JAX ----------------------------------------------------------------------------------
def jax_runner(graph: Graph, params: dict, threads: int) -> Runner:
    """``jax.jit`` of the graph; the weights are closed over (constants to XLA, as ONNX
    initializers are to onnxruntime). XLA's CPU client uses every core of this machine;
    ``threads`` is checked against that rather than set (JAX has no per-call knob)."""
    os.environ.setdefault("XLA_FLAGS", f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}")
    import jax
    import jax.numpy as jnp
    fns = _jax_table(jax, jnp)
    weights = {k: jnp.asarray(v) for k, v in params.items()}

    def forward(inputs):
        return _walk(graph, fns, inputs, weights)

    jitted = jax.jit(forward)
    return lambda inputs: [np.asarray(o) for o in jax.block_until_ready(jitted(inputs))]


def _jax_table(jax, jnp) -> dict[str, Callable]:
    lax = jax.lax

    def attention(q, k, v, *, scale, **_):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * scale
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    def conv(x, w, b=None, *, strides, pads, dilations, groups):
        y = lax.conv_general_dilated(x, w, strides, list(zip(pads[:2], pads[2:])), rhs_dilation=dilations,
                                     feature_group_count=groups)
        return y if b is None else y + b.reshape(1, -1, 1, 1)

    def max_pool(x, *, kernel, strides, pads, **_):
        pad = [(0, 0), (0, 0)] + list(zip(pads[:2], pads[2:]))
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1) + kernel, (1, 1) + strides, pad)

    return {**_common_table(jnp, jax.nn.gelu, attention), "conv": conv, "pool2d": max_pool}


# --- numpy --------------------------------------------------------------------------------
def numpy_runner(graph: Graph, params: dict, threads: int) -> Runner:
    """Plain numpy, one call per op as a user would write it (scipy's ``erf`` for gelu);
    BLAS on numpy's OpenBLAS with its own thread count, which must be ``threads``."""
    from scipy.special import erf
    from threadpoolctl import threadpool_info
    counts = {i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"}
    if counts and counts != {threads}:
        raise RuntimeError(f"numpy's OpenBLAS runs {counts} threads, the benchmark asks for {threads}")

    def gelu(x, approximate=False):
        return 0.5 * x * (1 + erf(x / np.float32(math.sqrt(2))))

    def attention(q, k, v, *, scale, **_):
        s = q @ k.swapaxes(-1, -2) * np.float32(scale)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)) @ v

    fns = {**_common_table(np, gelu, attention), "conv": _numpy_conv, "pool2d": _numpy_max_pool}
    return lambda inputs: _walk(graph, fns, inputs, params)


def _numpy_conv(x, w, b=None, *, strides, pads, dilations, groups):
    """im2col by sliding_window_view, then one tensordot (groups=1, unit dilation)."""
    assert groups == 1 and dilations == (1, 1)
    padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    windows = np.lib.stride_tricks.sliding_window_view(padded, w.shape[2:], axis=(2, 3))
    windows = windows[:, :, ::strides[0], ::strides[1]]
    y = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def _numpy_max_pool(x, *, kernel, strides, pads, **_):
    assert not any(pads)
    windows = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=(2, 3))
    return windows[:, :, ::strides[0], ::strides[1]].max(axis=(4, 5))


# --- shared by the array libraries -----------------------------------------------------
def _common_table(xp, gelu, attention) -> dict[str, Callable]:
    """Kinds whose translation reads the same in numpy and jax.numpy (``xp``)."""

    def layer_norm(x, gamma, beta=None, *, axis, eps):
        axes = tuple(range(axis, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x - mean) / xp.sqrt(var + xp.float32(eps)) * gamma
        return y if beta is None else y + beta

    def split(x, *, sizes, axis):
        return tuple(xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))

    return {
        "add": xp.add, "sub": xp.subtract, "mul": xp.multiply, "div": xp.divide, "max": xp.maximum,
        "min": xp.minimum, "matmul": xp.matmul, "tanh": xp.tanh, "exp": xp.exp, "neg": xp.negative,
        "abs": xp.abs, "sqrt": xp.sqrt, "log": xp.log,
        "relu": lambda x: xp.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + xp.exp(-x)),
        "gelu": lambda x: gelu(x, approximate=False),
        "reshape": lambda x, *, dims: x.reshape(dims), "transpose": lambda x, *, perm: x.transpose(perm),
        "split": split, "layer_norm": layer_norm, "attention": attention,
        "reduce_mean": lambda x, *, axes, keepdims: x.mean(axis=axes, keepdims=keepdims),
    }


def _walk(graph: Graph, fns: dict[str, Callable], inputs: dict, params: dict) -> list:
    """Evaluate ``graph`` with one library call per node from ``fns``."""
    values: dict[Ref, object] = {}
    for n in graph.nodes:
        if n.kind == "input":
            out = inputs[n.attrs["name"]]
        elif n.kind == "param":
            out = params[n.attrs["name"]]
        elif n.kind == "constant":
            out = n.attrs["value"]
        elif n.kind in fns:
            out = fns[n.kind](*(values[r] for r in n.inputs), **n.attrs)
        else:
            raise NotImplementedError(f"no translation for {n.label}")
        for i, o in enumerate(out if isinstance(out, tuple) else (out,)):
            values[Ref(n.id, i)] = o
    return [values[r] for r in graph.outputs]


# name -> runner factory, in the order the benchmark reports them.
PEERS: dict[str, Callable[[Graph, dict, int], Runner]] = {
    "onnxruntime": onnxruntime_runner, "jax.jit": jax_runner, "numpy": numpy_runner,
}

"""The toy backend: walks the graph in node order and runs each node with numpy.

Real backends plan memory and fuse kernels at compile time; this one shows the
contract only -- what ``supported_ops`` claims, how nodes, ``Ref`` s, inputs, params
and outputs fit together, and how ``run`` honours ``out=``.
"""
from __future__ import annotations

import numpy as np

from rlx_core import Availability, Backend, Device, DType, ExecutableGraph

FLOATS = frozenset({DType.F32, DType.F64})  # DType members, never strings


def _sum(node, x):
    return np.sum(x, axis=node.attrs["axes"], keepdims=node.attrs["keepdims"], dtype=x.dtype)


# op kind -> kernel(node, *input arrays) -> output array (see rlx_core.ir.ops for each
# kind's inputs and attributes, rlx_core.reference for its exact numbers)
KERNELS = {
    "constant": lambda node: node.attrs["value"],
    "add": lambda node, a, b: np.add(a, b),
    "sub": lambda node, a, b: np.subtract(a, b),
    "mul": lambda node, a, b: np.multiply(a, b),
    "div": lambda node, a, b: np.divide(a, b),
    "neg": lambda node, x: np.negative(x),
    "exp": lambda node, x: np.exp(x),
    "tanh": lambda node, x: np.tanh(x),
    "relu": lambda node, x: np.maximum(x, 0).astype(x.dtype),
    "matmul": lambda node, a, b: np.matmul(a, b),
    "reduce_sum": _sum,
}
MAX_ELEMENTS = 1 << 24


class ToyBackend(Backend):
    name = "toy"
    device = Device("toy")  # a known kind: rlx_toy.plugin registered it

    def is_available(self) -> Availability:
        # "software": True -- it runs on the host's cores, so the automatic device pick
        # prefers the cpu backend unless the toy is measured faster on a graph.
        return Availability(True, f"numpy {np.__version__} on the host", {"numpy": np.__version__, "software": True})

    def supported_ops(self):
        return {kind: FLOATS for kind in KERNELS}

    def check_node(self, node):
        """Finer than kind x dtype: a reason to reject this node, or None."""
        if any(s.size > MAX_ELEMENTS for s in node.outputs):
            return f"toy runs tensors of at most {MAX_ELEMENTS} elements"
        return None

    def advisory_capabilities(self):
        return frozenset()  # nothing from rlx_core.runtime.backend.CAPABILITIES

    def compile(self, graph, options):
        return ToyExecutable(graph)


class ToyExecutable(ExecutableGraph):
    capabilities = frozenset()

    def __init__(self, graph):
        # Graph.nodes is in topological order: every node's inputs come earlier.
        self.graph = graph
        self.params: dict[str, np.ndarray] = {}

    def set_param(self, name, value):
        self.params[name] = np.array(value, copy=True)  # the caller may reuse its array

    def run(self, inputs, out=None):
        values = {}  # Ref(node id, output index) -> array
        with np.errstate(all="ignore"):  # inf/nan are results, as in the reference
            for node in self.graph.nodes:
                if node.kind == "input":
                    result = inputs[node.attrs["name"]]
                elif node.kind == "param":
                    result = self.params[node.attrs["name"]]
                else:
                    args = [values[ref] for ref in node.inputs]
                    result = KERNELS[node.kind](node, *args)
                # every kind here has one output; multi-output kinds fill index 1, 2, ...
                values[(node.id, 0)] = np.asarray(result, dtype=node.outputs[0].dtype.np)
        results = [values[tuple(ref)] for ref in self.graph.outputs]
        if out is None:
            return [np.array(r, copy=True) for r in results]  # never hand out inputs/params
        for buf, r in zip(out, results):
            np.copyto(buf, r)
        return list(out)

"""The precision policy as a graph rewrite (see ``PrecisionPolicy`` for the modes).

Graph boundaries keep their declared dtypes: inputs and params are cast after they
enter, outputs are cast back before they leave, and control-flow operands are cast
back to the dtypes their subgraphs declare (the policy applies inside each subgraph
in turn). If an op kind does not accept the policy's dtype, that node stays in f32.
"""
from __future__ import annotations

from ..errors import DTypeError
from ..ir.dtypes import DType, promote
from ..ir.graph import Graph, subgraphs_of
from ..runtime.options import PrecisionPolicy
from .rewrite import copy_node, rebuild

__all__ = ["apply_precision", "HEAVY_KINDS", "F32_KINDS"]

POLICY_FLOATS = frozenset({DType.F32, DType.F16, DType.BF16})  # f64 is never changed
HEAVY_KINDS = frozenset({"matmul", "conv", "conv_transpose2d", "attention"})
F32_KINDS = frozenset({
    "reduce_sum", "reduce_mean", "reduce_prod", "softmax", "log_softmax", "cumsum", "layer_norm", "rms_norm",
    "group_norm", "exp", "log", "softplus", "pow", "dense_solve", "fft", "rsqrt", "reciprocal",
})
_LOW = {PrecisionPolicy.F16: DType.F16, PrecisionPolicy.BF16: DType.BF16,
        PrecisionPolicy.AMP_F16: DType.F16, PrecisionPolicy.AMP_BF16: DType.BF16,
        PrecisionPolicy.AMP_CONSERVATIVE: DType.F16, PrecisionPolicy.F32: DType.F32}


def _target(policy: PrecisionPolicy, kind: str) -> DType | None:
    """The dtype float inputs of a ``kind`` node are cast to; None = follow the inputs."""
    if policy in (PrecisionPolicy.F32, PrecisionPolicy.F16, PrecisionPolicy.BF16):
        return _LOW[policy]
    if kind in HEAVY_KINDS:
        return _LOW[policy]
    if policy is PrecisionPolicy.AMP_CONSERVATIVE or kind in F32_KINDS:
        return DType.F32
    return None


def apply_precision(graph: Graph, policy: "PrecisionPolicy | str | None") -> Graph:
    policy = PrecisionPolicy.of(policy)
    if policy is PrecisionPolicy.DECLARED:
        return graph
    uniform = _target(policy, "") if policy in (PrecisionPolicy.F32, PrecisionPolicy.F16,
                                                PrecisionPolicy.BF16) else None

    def visit(new: Graph, node, ins):
        if node.kind in ("input", "param"):
            return None
        if node.kind == "constant":
            val = node.attrs["value"]
            if uniform and DType.of(val.dtype) in POLICY_FLOATS:
                return [new.constant(val.astype(uniform.np))]
            return None
        subs = subgraphs_of(node)
        if subs:
            # Control flow: operands back to declared dtypes, the policy inside each body.
            ins = [new.cast(v, orig) for v, orig in zip(ins, (graph.shape_of(r).dtype for r in node.inputs))]
            attrs = {k: _map_subgraphs(v, policy) for k, v in node.attrs.items()}
            return copy_node(new, node, ins, attrs)
        attrs = dict(node.attrs)
        if uniform:
            for key in ("to", "dtype"):
                if isinstance(attrs.get(key), DType) and attrs[key] in POLICY_FLOATS:
                    attrs[key] = uniform
        target = _target(policy, node.kind)
        floats = [v.dtype for v in ins if v.dtype in POLICY_FLOATS]
        if target is None and floats:
            target = floats[0]
            for d in floats[1:]:
                target = promote(target, d)
        try:
            outs = copy_node(new, node, _cast_floats(new, ins, target), attrs)
        except DTypeError:  # this kind does not take the policy's dtype: keep it in f32
            outs = copy_node(new, node, _cast_floats(new, ins, DType.F32), node.attrs)
        if policy is PrecisionPolicy.AMP_CONSERVATIVE and node.kind in HEAVY_KINDS:
            outs = [new.cast(v, DType.F32) if v.dtype in POLICY_FLOATS else v for v in outs]
        return outs

    def finish(new: Graph, outs):
        return [new.cast(v, orig) for v, orig in zip(outs, (s.dtype for s in graph.output_shapes))]

    return rebuild(graph, visit, finish)


def _cast_floats(new: Graph, ins, target: DType | None):
    if target is None:
        return ins
    return [new.cast(v, target) if v.dtype in POLICY_FLOATS else v for v in ins]


def _map_subgraphs(value, policy):
    if isinstance(value, Graph):
        return apply_precision(value, policy)
    if isinstance(value, tuple) and value and all(isinstance(g, Graph) for g in value):
        return tuple(apply_precision(g, policy) for g in value)
    return value

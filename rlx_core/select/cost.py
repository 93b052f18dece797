"""The cost model: how long one ``run`` of a graph takes on a device, in nanoseconds.

One unit system throughout: work in FLOPs and bytes, device figures in GFLOP/s and
GB/s (both "per nanosecond"), overheads in ns. The graph side is static and counted
once per graph (:func:`graph_cost`); the device side is a :class:`DeviceFigures`
record, measured by calibration or nominal (``calibration.py``).

For one run on device *d*::

    t = roundtrip_d + sum over executed nodes of [ dispatch_d(kind) + max(flops / rate_d(class),
                                                                          bytes / memory_bw_d) ]
        + (graph input bytes + output bytes) / transfer_bw_d       (discrete devices only)

* ``dispatch_d(kind)`` is the kind's own call overhead where calibration timed it (a
  kernel that validates or prepares a lot costs more per call), else ``dispatch_overhead_ns``.
* ``flops / rate`` is replaced by ``elements * ns_per_element`` when calibration timed that
  kind on this device (``elements`` = the largest operand's size; the per-element time is
  interpolated between the two probe sizes in log2 of the size): Python-hosted kernels
  differ by 100x between kinds of equal FLOPs, and slow down out of cache. Otherwise
  ``rate(gemm)`` is ``sgemm_gflops`` (halved for f64) and ``rate(vector)`` is ``vector_gflops``.
* A node's bytes are what it reads plus what it writes, with real dtype sizes.
* Backends that advertise ``fused_elementwise`` run an elementwise node whose only user is
  another elementwise node inside that user's kernel: it costs its flops, but no dispatch
  and no memory traffic for the value passed between them.
* Control-flow bodies are counted once (trip counts are not known statically).

FLOPs per kind (``*`` = leading batch dims; shapes as the op's inputs give them):

=====================================  =====================================================
``matmul``                             2 * out_elems * K                               (gemm)
``conv``                               2 * out_elems * prod(weight dims[1:])           (gemm)
``conv_transpose2d``                   2 * x_elems * prod(weight dims[1:])             (gemm)
``attention``                          scores * (2 D + 2 Dv + 5), scores = B Hq Sq Sk  (gemm)
``dense_solve``                        * (2/3 n^3 + 2 n^2 k)                           (gemm)
``fft``; ``rfft`` / ``irfft``          5 n log2 n per transform; half for the real ones
``pool2d``                             out_elems * kernel window
transcendental elementwise             8 per output element
``softmax``; norms; ``rope``           5; 8; 6 per output element
``reduce_*``, ``cum*``, ``arg*``       1 per input element
view kinds (``reshape``, ``constant``) 0 flops, 0 bytes (a dispatch only)
any other kind (documented default)    1 per output element, bytes read + written
=====================================  =====================================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..ir.dtypes import DType
from ..ir.graph import Graph, subgraphs_of
from ..ir.shape import Shape

__all__ = ["NodeCost", "GraphCost", "DeviceFigures", "graph_cost", "estimate_ns", "node_flops", "GEMM_KINDS"]

GEMM, VECTOR = "gemm", "vector"
GEMM_KINDS = frozenset({"matmul", "conv", "conv_transpose2d", "attention", "dense_solve"})
TRANSCENDENTAL = frozenset({"exp", "log", "sin", "cos", "tan", "atan", "atan2", "tanh", "sigmoid", "erf", "gelu",
                            "gelu_tanh", "silu", "softplus", "pow", "sqrt", "rsqrt"})
VIEW_KINDS = frozenset({"reshape", "constant"})
# Kinds a fusing backend can merge with their neighbours (one kernel per chain).
FUSIBLE_GROUPS = frozenset({"elementwise"})
F64_GEMM_FACTOR = 0.5


@dataclass(frozen=True)
class NodeCost:
    """Static cost of one node: FLOPs, work class, bytes per input and of its output."""

    node: int
    kind: str
    work: str
    flops: float
    elements: int  # size of the largest operand (input or output)
    in_bytes: tuple[int, ...]
    out_bytes: int
    inputs: tuple[int, ...]  # producing node ids, aligned with in_bytes
    fusible: bool
    dtype: DType


@dataclass(frozen=True)
class GraphCost:
    """Everything about a graph the cost model needs, counted once."""

    nodes: tuple[NodeCost, ...]
    input_bytes: int
    output_bytes: int
    outputs: frozenset[int]  # node ids whose values leave the graph

    @property
    def flops(self) -> float:
        return sum(n.flops for n in self.nodes)

    @property
    def bytes(self) -> int:
        return sum(sum(n.in_bytes) + n.out_bytes for n in self.nodes)

    def by_kind(self) -> dict[str, tuple[int, float]]:
        """kind -> (node count, FLOPs)."""
        out: dict[str, tuple[int, float]] = {}
        for n in self.nodes:
            count, flops = out.get(n.kind, (0, 0.0))
            out[n.kind] = (count + 1, flops + n.flops)
        return out


@dataclass(frozen=True)
class DeviceFigures:
    """A device's throughput and overheads (GFLOP/s, GB/s, ns).

    ``transfer_bw_gbps`` None means inputs and outputs need no copy across a bus (host
    or unified memory). ``fuses_elementwise`` comes from the backend's advisory
    capabilities. ``source`` says where the numbers came from (``calibrated`` / ``nominal``).
    """

    sgemm_gflops: float
    memory_bw_gbps: float
    roundtrip_overhead_ns: float
    dispatch_overhead_ns: float
    vector_gflops: float
    transfer_bw_gbps: float | None = None
    fuses_elementwise: bool = False
    source: str = "nominal"
    kind_dispatch_ns: Mapping[str, float] = field(default_factory=dict)
    kind_ns_per_element: Mapping[str, Sequence[float]] = field(default_factory=dict)
    kind_probe_sizes: tuple[int, int] = (1, 2)

    def dispatch_ns(self, kind: str) -> float:
        return self.kind_dispatch_ns.get(kind, self.dispatch_overhead_ns)

    def compute_ns(self, node: NodeCost) -> float:
        timed = self.kind_ns_per_element.get(node.kind)
        if timed is not None:
            return node.elements * _interpolate(node.elements, self.kind_probe_sizes, timed)
        return node.flops / self.rate(node.work, node.dtype)

    def rate(self, work: str, dtype: DType) -> float:
        if work == GEMM:
            return self.sgemm_gflops * (F64_GEMM_FACTOR if dtype in (DType.F64, DType.C128) else 1.0)
        return self.vector_gflops


def _interpolate(n: int, sizes: tuple[int, int], values: Sequence[float]) -> float:
    """Per-element cost at ``n`` elements: the small/large probe values, linear in log2(n)
    between the probe sizes, flat outside them."""
    (lo, hi), (v_lo, v_hi) = sizes, values
    if n <= lo:
        return v_lo
    if n >= hi:
        return v_hi
    t = (math.log2(n) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return v_lo + t * (v_hi - v_lo)


# --- FLOP rules ---------------------------------------------------------------------------
FlopRule = Callable[[Sequence[Shape], Sequence[Shape], Mapping], float]


def _matmul(ins, outs, attrs):
    a = ins[0]
    return 2.0 * outs[0].size * (a.dims[-1] if a.rank else 1)


def _conv(ins, outs, attrs):
    return 2.0 * outs[0].size * math.prod(ins[1].dims[1:])


def _conv_transpose(ins, outs, attrs):
    return 2.0 * ins[0].size * math.prod(ins[1].dims[1:])


def _attention(ins, outs, attrs):
    q, k, v = ins[0], ins[1], ins[2]  # [B, Hq, Sq, D], [B, Hkv, Sk, D], [B, Hkv, Sk, Dv]
    scores = math.prod(q.dims[:-1]) * k.dims[-2]
    return scores * (2.0 * q.dims[-1] + 2.0 * v.dims[-1] + 5.0)


def _dense_solve(ins, outs, attrs):
    a, b = ins[0], ins[1]
    n = a.dims[-1] if a.rank else 1
    batch = a.size // max(n * n, 1)
    k = b.size // max(batch * n, 1)
    return batch * (2.0 / 3.0 * n ** 3 + 2.0 * n * n * k)


def _fft(ins, outs, attrs):
    n = attrs["n"]
    return 5.0 * outs[0].size * math.log2(max(n, 2))


def _real_fft(ins, outs, attrs):
    """Half a complex transform of length n; transforms = out elements / out axis length."""
    n, out = attrs["n"], outs[0]
    transforms = out.size // max(out.dims[attrs["axis"]], 1)
    return 2.5 * transforms * n * math.log2(max(n, 2))


def _pool(ins, outs, attrs):
    return float(outs[0].size * math.prod(attrs["kernel"]))


def _per_out(per):
    return lambda ins, outs, attrs: per * sum(o.size for o in outs)


def _per_in(per):
    return lambda ins, outs, attrs: per * (ins[0].size if ins else 0)


FLOP_RULES: dict[str, FlopRule] = {
    "matmul": _matmul, "conv": _conv, "conv_transpose2d": _conv_transpose, "attention": _attention,
    "dense_solve": _dense_solve, "fft": _fft, "rfft": _real_fft, "irfft": _real_fft, "pool2d": _pool,
    "softmax": _per_out(5), "log_softmax": _per_out(5), "layer_norm": _per_out(8), "rms_norm": _per_out(8),
    "group_norm": _per_out(8), "rope": _per_out(6),
    **{k: _per_out(8) for k in TRANSCENDENTAL},
}


def node_flops(kind: str, ins: Sequence[Shape], outs: Sequence[Shape], attrs: Mapping | None = None) -> float:
    """FLOPs of one node of ``kind`` (see the module table; default 1 per output element)."""
    if kind in VIEW_KINDS:
        return 0.0
    rule = FLOP_RULES.get(kind)
    if rule is None and (kind.startswith("reduce_") or kind.startswith("cum") or kind.startswith("arg")):
        rule = _per_in(1)
    return float((rule or _per_out(1))(ins, outs, attrs or {}))


def graph_cost(graph: Graph) -> GraphCost:
    """Count ``graph`` (and its control-flow bodies, once each)."""
    ids: dict[tuple[int, int], int] = {}  # (graph identity, node id) -> id in this GraphCost

    def uid(g: Graph, node_id: int) -> int:
        return ids.setdefault((id(g), node_id), len(ids))

    nodes = tuple(_count(graph, uid))
    inputs = sum(n.outputs[0].nbytes for n in graph.input_nodes)
    outputs = sum(graph.shape_of(r).nbytes for r in graph.outputs)
    return GraphCost(nodes, inputs, outputs, frozenset(uid(graph, r.node) for r in graph.outputs))


def _count(graph: Graph, uid):
    for node in graph.nodes:
        if node.kind in ("input", "param"):
            continue
        ins = [graph.shape_of(r) for r in node.inputs]
        view = node.kind in VIEW_KINDS
        yield NodeCost(node=uid(graph, node.id), kind=node.kind,
                       work=GEMM if node.kind in GEMM_KINDS else VECTOR,
                       flops=node_flops(node.kind, ins, node.outputs, node.attrs),
                       elements=0 if view else max(s.size for s in (*ins, *node.outputs)),
                       in_bytes=tuple(0 if view else s.nbytes for s in ins),
                       out_bytes=0 if view else sum(o.nbytes for o in node.outputs),
                       inputs=tuple(uid(graph, r.node) for r in node.inputs),
                       fusible=node.schema.group in FUSIBLE_GROUPS,
                       dtype=ins[0].dtype if ins else node.outputs[0].dtype)
        for sub in subgraphs_of(node):
            yield from _count(sub, uid)


def estimate_ns(cost: GraphCost, figures: DeviceFigures) -> float:
    """Predicted wall time of one run, in ns (see the module docstring)."""
    fused = _fused_into_user(cost) if figures.fuses_elementwise else frozenset()
    total = figures.roundtrip_overhead_ns
    for n in cost.nodes:
        moved = sum(b for b, src in zip(n.in_bytes, n.inputs) if src not in fused)
        if n.node not in fused:
            moved += n.out_bytes
            total += figures.dispatch_ns(n.kind)
        total += max(figures.compute_ns(n), moved / figures.memory_bw_gbps)
    if figures.transfer_bw_gbps:
        total += (cost.input_bytes + cost.output_bytes) / figures.transfer_bw_gbps
    return total


def _fused_into_user(cost: GraphCost) -> frozenset[int]:
    """Fusible nodes with exactly one user, itself fusible, that are not graph outputs."""
    users: dict[int, list[NodeCost]] = {}
    for n in cost.nodes:
        for src in n.inputs:
            users.setdefault(src, []).append(n)
    fusible = {n.node for n in cost.nodes if n.fusible}
    return frozenset(node for node in fusible if node not in cost.outputs
                     and len(users.get(node, ())) == 1 and users[node][0].node in fusible)

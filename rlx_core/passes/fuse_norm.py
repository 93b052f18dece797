"""LayerNorm and RMSNorm written out by exporters, back to ``layer_norm`` / ``rms_norm``.

    layer_norm: d = x - mean(x); d / sqrt(mean(d**2) + eps) * gamma + beta
    rms_norm:   x / sqrt(mean(x**2) + eps) * gamma + beta

with ``mean`` a ``reduce_mean`` over the trailing axes ``axis..rank-1`` with
``keepdims`` (both means over the same axes), the square as ``pow(., 2)`` or a product,
the inverse square root as ``div``, ``reciprocal``, ``pow(., -1)``-free forms or
``rsqrt``, ``eps`` a one-element constant >= 0 added inside the root. ``gamma`` (any
product of values that vary along the normalized axes only, and constant coefficients)
and ``beta`` (one such value added) are optional. Anything else -- a mean over other
axes, without keepdims, eps outside the root, a gamma that varies along the leading
axes -- is left alone.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph
from ..ir.node import Node, Ref
from .edit import Match, apply_matches
from .pattern import const_scalar, factors, is_trailing_axes, terms

__all__ = ["fuse_norms"]


def fuse_norms(graph: Graph) -> tuple[Graph, list[str]]:
    return apply_matches(graph, _find)


def _find(graph: Graph, node: Node, uses) -> Match | None:
    out = node.outputs[0]
    if node.kind not in ("add", "mul", "div") or not out.dtype.is_float:
        return None
    root = Ref(node.id)
    beta, product, covers = None, root, set()
    if node.kind == "add":
        const, parts, covers = terms(graph, root)
        if const != 0.0 or len(parts) != 2:
            return None
        for cand, other in (parts, parts[::-1]):
            if graph.shape_of(cand).dims == out.dims and graph.nodes[cand.node].kind in ("mul", "div"):
                product, beta = cand, other
                break
        else:
            return None
    coef, powers, nodes = factors(graph, product)
    covers = covers | nodes
    for inv, k in powers.items():
        found = _inverse_root(graph, inv, k)
        if found is None:
            continue
        kind, x, axis, eps, inner = found
        rest = dict(powers)
        del rest[inv]
        centered = x if kind == "rms_norm" else inner["centered"]
        if rest.pop(centered, None) != 1 or graph.shape_of(centered).dims != out.dims:
            continue
        gamma = list(rest)
        if any(p != 1 for p in rest.values()) or not all(
                _along(graph, r, out.dims, axis) for r in gamma + ([beta] if beta is not None else [])):
            continue
        covers |= inner["nodes"]
        return Match(node.id, frozenset(covers), _emitter(kind, x, axis, eps, coef, gamma, beta, out),
                     f"{kind} (axis={axis}, eps={eps:g})")
    return None


def _inverse_root(graph: Graph, ref: Ref, power: int):
    """``(kind, x, axis, eps, inner)`` when ``ref ** power`` is ``1/sqrt(mean(z**2) + eps)``
    with z = x (rms_norm) or z = x - mean(x) (layer_norm, ``inner["centered"]`` = z)."""
    node = graph.nodes[ref.node]
    if not ((node.kind == "sqrt" and power == -1) or (node.kind == "rsqrt" and power == 1)):
        return None
    const, parts, add_nodes = terms(graph, node.inputs[0])
    if len(parts) != 1 or not 0.0 <= const < np.inf:
        return None
    mean_sq = graph.nodes[parts[0].node]
    axis = _mean_axis(graph, mean_sq)
    if axis is None:
        return None
    coef, sq, sq_nodes = factors(graph, mean_sq.inputs[0])
    if coef != 1.0 or len(sq) != 1 or next(iter(sq.values())) != 2:
        return None
    z = next(iter(sq))
    if graph.shape_of(z).dims != graph.shape_of(mean_sq.inputs[0]).dims:
        return None
    nodes = {node.id, mean_sq.id} | add_nodes | sq_nodes
    inner = {"centered": z, "nodes": nodes}
    zn = graph.nodes[z.node]
    if zn.kind == "sub":
        x, mean = zn.inputs
        mn = graph.nodes[mean.node]
        if mn.kind == "reduce_mean" and mn.inputs[0] == x and _mean_axis(graph, mn) == axis \
                and graph.shape_of(x).dims == graph.shape_of(z).dims:
            nodes |= {zn.id, mn.id}
            return "layer_norm", x, axis, float(const), inner
    return "rms_norm", z, axis, float(const), inner


def _mean_axis(graph: Graph, node: Node) -> int | None:
    """The first normalized axis of a keepdims ``reduce_mean`` over trailing axes."""
    if node.kind != "reduce_mean" or not node.attrs["keepdims"]:
        return None
    return is_trailing_axes(node.attrs["axes"], graph.shape_of(node.inputs[0]).rank)


def _along(graph: Graph, ref: Ref, dims, axis: int) -> bool:
    """``ref`` broadcasts into ``dims`` varying along axes ``axis..`` only."""
    s = graph.shape_of(ref)
    if s.rank > len(dims):
        return False
    lead = len(dims) - s.rank
    return all(d == 1 for i, d in enumerate(s.dims, lead) if i < axis) and all(
        d in (1, dims[i]) for i, d in enumerate(s.dims, lead))


def _emitter(kind, x, axis, eps, coef, gamma, beta, out):
    norm_dims = out.dims[axis:]

    def emit(new: Graph, lookup):
        g = None
        for r in gamma:
            g = lookup(r) if g is None else new.mul(g, lookup(r))
        if g is None:
            g = new.constant(np.full(norm_dims, coef, out.dtype.np))
        else:
            g = _to_dims(new, g if coef == 1.0 else new.mul(g, coef), norm_dims)
        b = [] if beta is None else [_to_dims(new, lookup(beta), norm_dims)]
        return [new.add_node(kind, [lookup(x), g] + b, {"axis": axis, "eps": eps})]
    return emit


def _to_dims(new: Graph, v, dims):
    """``v`` (broadcasting into ``dims`` from the right, size-1 axes before them) as exactly ``dims``."""
    dims = tuple(dims)
    tail = v.dims[-len(dims):] if v.rank >= len(dims) else (1,) * (len(dims) - v.rank) + v.dims
    if tail != v.dims:
        v = new.reshape(v, tail)
    return v if tail == dims else new.add_node("expand", [v], {"dims": dims})

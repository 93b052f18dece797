"""Reading elementwise expressions for the pattern passes.

Exporters write one formula in many shapes: ``0.5 * x * (1 + t)``, ``x * 0.5 * (t + 1)``,
``(x * (1 + t)) / 2``. :func:`factors` reads a product through ``mul``, ``div``,
``neg``, ``reciprocal`` and ``pow`` by a small integer constant into a coefficient
and the powers of its other factors, so a matcher checks what is multiplied, not how
the exporter nested it; :func:`terms` does the same for sums. Only one-element
constants become coefficients: a matcher that needs a tensor factor finds it among the
factors. Coefficients are compared with the constant the formula needs, rounded to
the graph's dtype (:func:`close_to`): a different constant is a different function.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.graph import Graph
from ..ir.node import Ref

__all__ = ["const_scalar", "const_array", "factors", "terms", "close_to", "node_of", "is_trailing_axes"]

_MAX_POWER = 4  # pow(x, k) is read as a product for integer k up to this
_BUDGET = 64    # nodes one factors()/terms() call reads through (shared subexpressions could
                # otherwise be read exponentially often); beyond it, values stay whole factors
_LOW_EPS = {DType.BF16: 2.0 ** -8, DType.F16: 2.0 ** -11}


def node_of(graph: Graph, ref: Ref):
    return graph.nodes[ref.node]


def const_array(graph: Graph, ref: Ref) -> np.ndarray | None:
    """The value of ``ref`` when a constant node produces it."""
    node = graph.nodes[ref.node]
    return node.attrs["value"] if node.kind == "constant" else None


def const_scalar(graph: Graph, ref: Ref) -> float | None:
    """The value of a one-element real constant, else None."""
    arr = const_array(graph, ref)
    if arr is None or arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(-1)[0])


def close_to(value: float | None, target: float, dtype: DType) -> bool:
    """``value`` is ``target`` as the graph's float ``dtype`` can hold it (a few units in
    the last place, so a constant computed in another precision still matches)."""
    if value is None or not dtype.is_float:
        return False
    eps = _LOW_EPS.get(dtype) or float(np.finfo(dtype.np).eps)
    return abs(value - target) <= 4 * eps * abs(target)


def factors(graph: Graph, ref: Ref, leaves=()) -> tuple[float, dict[Ref, int], set[int]]:
    """``(coef, powers, nodes)``: ``ref`` as ``coef * prod(f ** k for f, k in powers)``,
    and the nodes read through (never through ``leaves``). A divisor that is not a
    constant stays one factor of power -1 (its own structure is its matcher's business)."""
    coef, powers, nodes, steps = 1.0, {}, set(), [0]

    def walk(r: Ref, k: int) -> None:
        nonlocal coef
        steps[0] += 1
        node = graph.nodes[r.node]
        c = const_scalar(graph, r)
        if c is not None:
            coef *= c ** k
            return
        if node.kind in ("mul", "div", "neg", "reciprocal", "pow") and steps[0] < _BUDGET and r not in leaves:
            how = _product_step(graph, node)
            if how is not None:
                nodes.add(node.id)
                scale, parts = how
                coef *= scale ** k
                for part, p in parts:
                    walk(part, k * p)
                return
        powers[r] = powers.get(r, 0) + k

    walk(ref, 1)
    return coef, {f: k for f, k in powers.items() if k}, nodes


def _product_step(graph: Graph, node):
    """How one product-like node splits: ``(scale, [(operand, power), ...])`` or None."""
    ins = node.inputs
    if node.kind == "mul":
        return 1.0, [(ins[0], 1), (ins[1], 1)]
    if node.kind == "div":
        return 1.0, [(ins[0], 1), (ins[1], -1)]
    if node.kind == "neg":
        return -1.0, [(ins[0], 1)]
    if node.kind == "reciprocal":
        return 1.0, [(ins[0], -1)]
    e = const_scalar(graph, ins[1])  # pow
    if e is not None and e == int(e) and 1 <= e <= _MAX_POWER:
        return 1.0, [(ins[0], int(e))]
    return None


def terms(graph: Graph, ref: Ref, leaves=()) -> tuple[float, list[Ref], set[int]]:
    """``(constant, refs, nodes)``: ``ref`` as ``constant + sum(refs)`` through ``add``
    nodes, and the nodes read through (never through ``leaves``)."""
    const, out, nodes, steps = 0.0, [], set(), [0]

    def walk(r: Ref) -> None:
        nonlocal const
        steps[0] += 1
        c = const_scalar(graph, r)
        if c is not None:
            const += c
            return
        node = graph.nodes[r.node]
        if node.kind == "add" and steps[0] < _BUDGET and r not in leaves:
            nodes.add(node.id)
            walk(node.inputs[0])
            walk(node.inputs[1])
            return
        out.append(r)

    walk(ref)
    return const, out, nodes


def is_trailing_axes(axes, rank: int) -> int | None:
    """The first axis when ``axes`` are exactly ``axis..rank-1`` (at least one), else None."""
    axes = tuple(axes or ())
    if not axes or axes != tuple(range(axes[0], rank)):
        return None
    return axes[0]

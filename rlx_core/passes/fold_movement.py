"""Transposes and reshapes folded into each other and into matmul operands.

* ``transpose(transpose(x, p), q)`` is one transpose (none when the perms cancel), a
  transpose by the identity perm or a reshape to the same dims is its input, and
  ``reshape(reshape(x))`` is one reshape;
* the flatten-project-unflatten sandwich exporters write for a linear layer,
  ``reshape(matmul(reshape(x, [M, K]), W) [+ b], x.dims[:-1] + [N])`` with a matrix ``W``
  and a bias ``b`` along the last axis, is ``matmul(x, W) [+ b]`` (matmul takes the
  batch dims itself).

The IR's matmul has no transpose flags: a transposed constant operand (ONNX Gemm's
``transB``, ``MatMul`` after ``Transpose``) becomes a pre-transposed constant by constant
folding; a transposed param stays a transpose, which backends read in place (rlx-cpu
hands BLAS the transposed view).
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.node import Node, Ref
from .edit import rewrite
from .fusion import use_counts

__all__ = ["fold_movement"]


def fold_movement(graph: Graph) -> tuple[Graph, list[str]]:
    uses = use_counts(graph)
    if not any(_collapsible(graph, n) or _sandwich(graph, n, uses) for n in graph.nodes):
        return graph, []
    notes: list[str] = []

    def visit(new: Graph, node: Node, lookup):
        found = _sandwich(graph, node, uses)
        if found is not None:
            x, w, bias = found
            y = new.matmul(lookup(x), lookup(w))
            if bias is not None:
                b = lookup(bias)
                y = new.add(y, b if b.rank <= 1 else new.reshape(b, b.dims[-1:]))
            notes.append(f"matmul without flatten/unflatten reshapes at {graph.describe(node)}")
            return [y]
        if node.kind not in ("transpose", "reshape"):
            return None
        x = lookup(node.inputs[0])
        src = new.nodes[x.ref.node]
        if node.kind == "transpose":
            perm = tuple(node.attrs["perm"])
            if src.kind == "transpose":
                perm = tuple(src.attrs["perm"][p] for p in perm)
                x = new.value(src.inputs[0])
            if perm == tuple(range(len(perm))):
                notes.append(f"identity transpose removed at {graph.describe(node)}")
                return [x]
            if x.ref != lookup(node.inputs[0]).ref:
                notes.append(f"transposes merged at {graph.describe(node)}")
            return [new.transpose(x, perm)]
        dims = tuple(node.attrs["dims"])
        if src.kind == "reshape":
            x = new.value(src.inputs[0])
        if x.dims == dims:
            notes.append(f"identity reshape removed at {graph.describe(node)}")
            return [x]
        if x.ref != lookup(node.inputs[0]).ref:
            notes.append(f"reshapes merged at {graph.describe(node)}")
        return [new.reshape(x, dims)]

    new = rewrite(graph, visit)
    return (new, notes) if notes else (graph, [])


def _collapsible(graph: Graph, node: Node) -> bool:
    if node.kind == "transpose":
        src = graph.nodes[node.inputs[0].node]
        return src.kind == "transpose" or tuple(node.attrs["perm"]) == tuple(range(len(node.attrs["perm"])))
    if node.kind == "reshape":
        src = graph.nodes[node.inputs[0].node]
        return src.kind == "reshape" or graph.shape_of(node.inputs[0]).dims == node.outputs[0].dims
    return False


def _sandwich(graph: Graph, node: Node, uses):
    """``(x, W, bias or None)`` when ``node`` is the unflatten reshape of a flattened matmul."""
    if node.kind != "reshape":
        return None
    inner, bias = node.inputs[0], None
    top = graph.nodes[inner.node]
    if top.kind == "add" and uses[inner] == 1:
        for mm, b in (top.inputs, top.inputs[::-1]):
            bs = graph.shape_of(b)
            if graph.nodes[mm.node].kind == "matmul" and (bs.rank <= 1 or set(bs.dims[:-1]) == {1}):
                inner, bias = mm, b
                break
        else:
            return None
    mm = graph.nodes[inner.node]
    if mm.kind != "matmul" or uses[inner] != 1 or graph.shape_of(mm.inputs[1]).rank != 2:
        return None
    flat = graph.nodes[mm.inputs[0].node]
    if flat.kind != "reshape":
        return None
    x = flat.inputs[0]
    xd, out = graph.shape_of(x).dims, node.outputs[0].dims
    if len(xd) < 3 or flat.outputs[0].rank != 2 or flat.outputs[0].dims[1] != xd[-1] \
            or out != xd[:-1] + mm.outputs[0].dims[-1:]:
        return None
    if bias is not None and graph.shape_of(bias).dims[-1:] not in ((), (1,), mm.outputs[0].dims[-1:]):
        return None
    return x, mm.inputs[1], bias

"""View folding: which movement ops never run as copies.

The outputs of transpose, slice, expand, frame, split and reshape are *views*: element
``(c_0, .., c_n)`` of the output is element ``offset + sum(c_d * strides[d])`` of the
input. A view is *folded* when every reader of it can read it in place through those
strides -- fused elementwise kernels, the other movement copies, concat, and the
attention kernels that take strided operands -- and it is not a graph output. A folded
view has no step and no memory; its readers read the value it views (views of views
compose down to a value that is materialized).

Reshapes of a materialized value stay what they always were: aliases of its bytes. A
reshape of a folded view that strides cannot express (e.g. merging two dims that are
not adjacent in memory) is materialized by a copy.

Attention outputs go the other way: when an attention whose kernel writes strided
output is read only by a transpose, the kernel writes straight into that transpose's
output (``written_as``) and the transpose has no step (``absorbed``).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from rlx_core.ir import Graph, Node, Ref, Shape

from .kernels.elementwise import ELEMENTWISE_KINDS, Access, broadcast_access, contiguous_strides

__all__ = ["Layout", "ViewPlan", "plan_views", "VIEW_KINDS", "view_layouts", "reshape_strides"]

VIEW_KINDS = frozenset({"transpose", "slice", "expand", "frame", "split", "reshape"})


@dataclass(frozen=True)
class Layout:
    """Where the elements of a value are: in value ``ref``'s memory, through ``access``
    (an element offset into ``ref`` plus one stride per dim of the value)."""

    ref: Ref
    access: Access


def contiguous(ref: Ref, shape: Shape) -> Layout:
    return Layout(ref, Access(shape.dtype, 0, contiguous_strides(shape.dims)))


@dataclass
class ViewPlan:
    graph: Graph
    folded: dict[Ref, Layout] = field(default_factory=dict)      # views read in place
    aliases: dict[Ref, Ref] = field(default_factory=dict)        # reshapes sharing their input's bytes
    written_as: dict[Ref, Layout] = field(default_factory=dict)  # outputs written into another value
    absorbed: set[int] = field(default_factory=set)              # transposes written by their producer

    def layout(self, ref: Ref) -> Layout:
        """How to read value ``ref``: in place if folded, else its own contiguous memory."""
        return self.folded.get(ref) or contiguous(ref, self.graph.shape_of(ref))

    def output_layout(self, ref: Ref) -> Layout:
        """Where a step writes value ``ref``."""
        return self.written_as.get(ref) or contiguous(ref, self.graph.shape_of(ref))

    def runs(self, node: Node) -> bool:
        """Whether view node ``node`` needs a step (some output is materialized by a copy)."""
        if node.id in self.absorbed:
            return False
        return any(Ref(node.id, i) not in self.folded and Ref(node.id, i) not in self.aliases
                   for i in range(len(node.outputs)))


def plan_views(graph: Graph, attention_strided: Callable[[Node], bool], enabled: bool = True) -> ViewPlan:
    """Which views fold (see the module docstring). ``attention_strided(node)``: whether
    that attention node's kernel reads q/k/v and writes its output through strides."""
    plan = ViewPlan(graph)
    readers: dict[Ref, list[tuple[Node, int]]] = defaultdict(list)
    for node in graph.nodes:
        for slot, r in enumerate(node.inputs):
            readers[r].append((node, slot))
    outputs = set(graph.outputs)
    if enabled:
        _absorb_output_transposes(graph, plan, readers, outputs, attention_strided)

    def reads_in_place(node: Node, slot: int) -> bool:
        if node.kind in ELEMENTWISE_KINDS or node.kind in VIEW_KINDS or node.kind == "concat":
            return True
        return node.kind == "attention" and slot < 3 and attention_strided(node)

    wanted = set()
    if enabled:
        for node in graph.nodes:
            if node.kind in VIEW_KINDS and node.id not in plan.absorbed:
                for i in range(len(node.outputs)):
                    r = Ref(node.id, i)
                    if r not in outputs and all(reads_in_place(n, s) for n, s in readers[r]):
                        wanted.add(r)
    for node in graph.nodes:  # in order: an input's layout is known before its readers'
        if node.kind not in VIEW_KINDS or node.id in plan.absorbed:
            continue
        source = node.inputs[0]
        if node.kind == "reshape" and source not in plan.folded:
            plan.aliases[Ref(node.id)] = source
            continue
        for i, lay in enumerate(view_layouts(node, plan.layout(source), graph.shape_of(source))):
            if Ref(node.id, i) in wanted and lay is not None:
                plan.folded[Ref(node.id, i)] = lay
    return plan


def _absorb_output_transposes(graph, plan, readers, outputs, attention_strided) -> None:
    for node in graph.nodes:
        ref = Ref(node.id)
        users = readers[ref]
        if node.kind != "attention" or ref in outputs or len(users) != 1 or users[0][0].kind != "transpose" \
                or not attention_strided(node):
            continue
        t = users[0][0]
        perm = t.attrs["perm"]
        t_strides = contiguous_strides(t.outputs[0].dims)
        strides = [0] * len(perm)
        for d, p in enumerate(perm):  # output dim d of the transpose is dim p of the attention
            strides[p] = t_strides[d]
        plan.written_as[ref] = Layout(Ref(t.id), Access(node.outputs[0].dtype, 0, tuple(strides)))
        plan.absorbed.add(t.id)


def view_layouts(node: Node, src: Layout, src_shape: Shape) -> list[Layout | None]:
    """The layout of each output of view node ``node`` whose input is read through
    ``src`` (None where strides cannot express it: a reshape that needs a copy)."""
    a, acc = node.attrs, src.access
    st, off, dt = acc.strides, acc.offset, acc.dtype

    def at(offset: int, strides: Sequence[int]) -> Layout:
        return Layout(src.ref, Access(dt, offset, tuple(strides)))
    kind = node.kind
    if kind == "transpose":
        return [at(off, [st[p] for p in a["perm"]])]
    if kind == "slice":
        out_dims = node.outputs[0].dims
        start = sum(s * stride for s, stride, n in zip(a["starts"], st, out_dims) if n)
        return [at(off + start, [step * stride for step, stride in zip(a["steps"], st)])]
    if kind == "expand":
        return [at(off, broadcast_access(dt, src_shape.dims, node.outputs[0].dims, strides=st).strides)]
    if kind == "frame":
        axis, hop = a["axis"], a["hop"]
        return [at(off, list(st[:axis]) + [hop * st[axis], st[axis]] + list(st[axis + 1:]))]
    if kind == "split":
        axis, start, out = a["axis"], 0, []
        for shape in node.outputs:
            out.append(at(off + start * st[axis], st))
            start += shape.dims[axis]
        return out
    if kind == "reshape":
        strides = reshape_strides(src_shape.dims, st, node.outputs[0].dims)
        return [None if strides is None else at(off, strides)]
    raise ValueError(f"not a view kind: {kind}")


def reshape_strides(dims: Sequence[int], strides: Sequence[int], new_dims: Sequence[int]) -> tuple[int, ...] | None:
    """Strides that read a strided tensor (``dims``, ``strides``) reshaped to ``new_dims``
    in row-major order without a copy, or None when no strides can (numpy's rule: each
    group of old dims that maps onto a group of new dims must be contiguous in itself)."""
    if 0 in dims:
        return contiguous_strides(new_dims)
    old = [(n, s) for n, s in zip(dims, strides) if n != 1]
    new = list(new_dims)
    out = [0] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        old_size, new_size = old[oi][0], new[ni]
        while old_size != new_size:
            if new_size < old_size:
                new_size *= new[nj]
                nj += 1
            else:
                old_size *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    return tuple(out)  # trailing new dims are all 1 (stride irrelevant)

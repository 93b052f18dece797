"""Memory planning: every value a step writes gets a fixed slice of one arena.

Values whose lifetimes do not overlap share bytes. Lifetimes are step intervals
``[defined, last used]``; graph inputs are defined before the first step and graph
outputs live to the end. Steps may also ask for *scratch* (temporaries that live only
during the step). Placement (``rlx_core.runtime.arena.place``) is greedy by size (largest first, each at the lowest
aligned offset that does not collide with an already placed value whose lifetime
overlaps), which is near-optimal for the chains and diamonds neural networks are
made of.

Values that need no arena bytes:

* params and constants: persistent buffers of their own;
* *views*: a ``reshape``, ``transpose``, ``slice``, ``split`` or ``expand`` whose result
  numpy can express as a view of its input (given the input's layout) is that view --
  no step, no copy; the viewed buffer lives as long as its views. A view is refused
  where a BLAS consumer (matmul, attention) needs a layout BLAS takes (one unit stride
  in the last two axes) and the view would not have one: there a copy is cheaper than
  numpy's internal one;
* *packed* values: a view of a param or constant that only BLAS reads, column-major in
  its last two axes (the transposed weight of an exported ``Gemm(transB=1)``), gets a
  row-major buffer of its own, refilled when its param is set, not on every run:
  OpenBLAS's AVX-512 kernels run ``A @ B`` faster than ``A @ B.T`` (the MLP 784-512-512-10
  at batch 64, two threads: 263 against 414 us), and no kernel runs it slower. The weight
  then takes its memory twice (the param's buffer, which ``set_param`` writes, and the copy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rlx_core import Graph, Node, Ref
from rlx_core.runtime.arena import Placement, place

from .schedule import FUSED, Step

__all__ = ["Placement", "MemoryPlan", "Scratch", "plan_memory", "view_function", "VIEW_KINDS", "blas_operand"]

VIEW_KINDS = frozenset({"reshape", "transpose", "slice", "split", "expand"})
PERSISTENT_KINDS = ("param", "constant")
BLAS_KINDS = frozenset({"matmul", "attention"})


@dataclass(frozen=True)
class Scratch:
    """Temporary ``index`` of step ``step`` (a key distinct from every Ref)."""

    step: int
    index: int


@dataclass
class MemoryPlan:
    placements: dict[Ref | Scratch, Placement]
    views: dict[Ref, tuple[Ref, Callable[[np.ndarray], np.ndarray]]]  # value -> (viewed value, how)
    steps: list[Step]  # the steps that remain (view and packed steps removed)
    scratch: list[list]  # each remaining step's temporaries (Shapes)
    size: int
    alignment: int
    packed: dict[Ref, tuple[Ref, Callable[[np.ndarray], np.ndarray]]]  # value -> (persistent value, how)

    def root(self, ref: Ref) -> Ref:
        """The value whose buffer ``ref`` lives in."""
        return _root(self.views, ref)


def view_function(node: Node, index: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """How output ``index`` of a movement node is taken from its input as a numpy view.

    The function raises ValueError when the input's layout does not allow a view."""
    a = node.attrs
    if node.kind == "reshape":
        dims = tuple(a["dims"])
        return lambda x: np.reshape(x, dims, copy=False)
    if node.kind == "transpose":
        perm = tuple(a["perm"])
        return lambda x: x.transpose(perm)
    if node.kind == "slice":
        index_tuple = tuple(slice(*b) for b in zip(a["starts"], a["stops"], a["steps"])) + (Ellipsis,)
        return lambda x: x[index_tuple]
    if node.kind == "split":
        start = sum(a["sizes"][:index])
        part = (slice(None),) * a["axis"] + (slice(start, start + a["sizes"][index]), Ellipsis)
        return lambda x: x[part]
    if node.kind == "expand":
        dims = tuple(a["dims"])
        return lambda x: np.broadcast_to(x, dims)
    raise ValueError(f"{node.kind} is not a view kind")


def blas_operand(x: np.ndarray) -> bool:
    """Can BLAS read ``x``'s last two axes in place (numpy's own test, in short)?"""
    if x.ndim < 2:
        return x.ndim == 0 or x.strides[-1] == x.itemsize or x.shape[-1] <= 1
    rows, cols = x.shape[-2:]
    s_row, s_col = x.strides[-2:]
    return (s_col == x.itemsize and s_row >= cols * x.itemsize) or \
        (s_row == x.itemsize and s_col >= rows * x.itemsize) or x.size <= 1


def _layout_model(shape, dtype) -> np.ndarray:
    """An array with ``shape``'s C-contiguous strides and no memory behind it (never read):
    numpy's view functions applied to it give the strides real views would have."""
    itemsize = np.dtype(dtype).itemsize
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, tuple(reversed(strides)), writeable=False)


def _views(graph: Graph, steps: list[Step]) -> tuple[dict[Ref, tuple[Ref, Callable]], dict[Ref, np.ndarray], set[Ref]]:
    """Which movement steps become views of their input (see the module docstring), each
    view's layout model, and the values BLAS reads."""
    models = {}
    blas_readers: set[Ref] = set()
    for s in steps:
        if s.kind in BLAS_KINDS:
            blas_readers.update(s.inputs)
        elif s.kind == FUSED and s.anchor is not None and s.anchor.kind == "matmul":
            blas_readers.update(s.anchor.inputs)

    def model(ref: Ref) -> np.ndarray:
        if ref not in models:
            shape = graph.shape_of(ref)
            models[ref] = _layout_model(shape.dims, shape.dtype.np)
        return models[ref]

    views = {}
    for s in steps:
        if s.kind not in VIEW_KINDS:
            continue
        source = s.node.inputs[0]
        taken = {}
        for out in s.outputs:
            fn = view_function(s.node, out.index)
            try:
                probe = fn(model(source))
            except ValueError:  # numpy needs a copy for this layout
                break
            if out in blas_readers and not blas_operand(probe):
                break
            taken[out] = (source, fn, probe)
        else:
            for out, (src, fn, probe) in taken.items():
                views[out] = (src, fn)
                models[out] = probe
    return views, models, blas_readers


def _root(views: dict, r: Ref) -> Ref:
    """The value whose buffer view ``r`` lives in."""
    while r in views:
        r = views[r][0]
    return r


def _packed(graph: Graph, steps: list[Step], views: dict, models: dict, blas_readers: set[Ref]) -> set[Ref]:
    """The views to pack (see the module docstring): of a param or constant, read by BLAS
    steps only, column-major in their last two axes."""
    other_readers: set[Ref] = set()  # values some step reads other than as a matmul operand
    for s in steps:
        matmul = s.kind == "matmul" or (s.kind == FUSED and s.anchor is not None and s.anchor.kind == "matmul")
        operands = set(s.inputs if s.kind == "matmul" else s.anchor.inputs) if matmul else set()
        other_readers.update(r for r in s.inputs if r not in operands)
    sources = {src for src, _ in views.values()}
    persistent = {n.id for n in graph.nodes if n.kind in PERSISTENT_KINDS}
    return {r for r, model in models.items()
            if r in views and r in blas_readers and r not in other_readers and r not in sources
            and r not in graph.outputs and _root(views, r).node in persistent
            and model.ndim >= 2 and model.strides[-1] != model.itemsize and model.shape[-1] > 1}


def plan_memory(graph: Graph, steps: list[Step], scratch: list[list], alignment: int = 64) -> MemoryPlan:
    """Plan the arena for running ``steps``; ``scratch[i]`` lists step i's temporaries
    (Shapes). View and packed steps are removed from the returned plan's ``steps``."""
    views, models, blas_readers = _views(graph, steps)
    packed = {r: views.pop(r) for r in _packed(graph, steps, views, models, blas_readers)}
    kept = [(s, sc) for s, sc in zip(steps, scratch) if not all(o in views or o in packed for o in s.outputs)]
    steps = [s for s, _ in kept]
    persistent = {n.id for n in graph.nodes if n.kind in PERSISTENT_KINDS}

    first: dict[Ref | Scratch, int] = {Ref(n.id): -1 for n in graph.input_nodes}
    last: dict[Ref | Scratch, int] = {}
    sizes: dict[Ref | Scratch, int] = {r: graph.shape_of(r).nbytes for r in first}
    for i, (s, temporaries) in enumerate(kept):
        for r in s.inputs:
            base = _root(views, r)
            last[base] = max(last.get(base, -1), i)
        for r in s.outputs:
            first[r] = i
            sizes[r] = graph.shape_of(r).nbytes
        for k, shape in enumerate(temporaries):
            first[Scratch(i, k)] = last[Scratch(i, k)] = i
            sizes[Scratch(i, k)] = shape.nbytes
    for r in graph.outputs:
        base = _root(views, r)
        if base.node not in persistent:
            last[base] = len(steps)

    placements, total = place({k: (first[k], last.get(k, first[k]), sizes[k]) for k in first}, alignment)
    return MemoryPlan(placements, views, steps, [sc for _, sc in kept], total, alignment, packed)



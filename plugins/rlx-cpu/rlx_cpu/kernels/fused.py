"""Fused steps: [anchor] -> elementwise program -> [norm], in one or two calls.

The step's elementwise nodes become a ``codegen.Program``; its operands are the
step's inputs, the anchor's result and (for conv) the anchor's bias; scalar constants
travel packed, one small array per dtype. The anchor (matmul or conv) writes its
result into one of the step's output buffers -- the generated kernel then reads and
overwrites it in place, element by element, reading it through the output's own name
(a norm's kernel keeps each row in a scratch buffer, so it may overwrite its input
too) -- or, for a channels-last conv, leaves it in its scratch for the kernel to read.
A step that is just conv (+ bias) -> relu runs in the conv's kernel where its route
applies that epilogue itself (``conv.absorbed_step``).

Layouts: operands are broadcast to the domain, size-1 axes are dropped and adjacent
axes merged wherever every operand's strides allow it (as numpy's iterator does), so
``x + bias`` over [128, 1024] is a two-deep loop reading ``bias[j]`` and most groups
run as one flat loop. A norm's normalized axes are merged among themselves only.

A lone elementwise node runs as its numpy ufunc when it has one. A group of nodes
that all have ufuncs, over at least ``MEASURE_MIN_ELEMENTS``, is timed both ways the
first time it is compiled (numba calls libm for log, sin, float64 exp..., which can
lose to numpy's SIMD loops); the faster choice is stored with the kernel cache
(``rlx_cpu.planner``).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from rlx_core import DType, Graph, Node, Ref, Shape

from ..cache import Decisions
from ..jit import generated_kernel, specialize
from ..jit.codegen import CONSTANT, LEAF, Operand, Program, ScalarOp, elementwise_source, rows_source
from ..planner import choice
from ..schedule import FUSED, Step, scalar_op
from . import Bound, Call, kernel
from .elementwise import direct_calls

__all__ = ["Fusion", "fused_step", "fused_scratch", "split_unprofitable", "rows_call", "elementwise_call",
           "MEASURE_MIN_ELEMENTS"]

MEASURE_MIN_ELEMENTS = 1 << 14
_decisions = Decisions()


# --- layouts -------------------------------------------------------------------------------
@dataclass
class _Layout:
    """A domain's axes after dropping size 1 and merging, split into segments."""

    dims: tuple[int, ...]
    segment_ranks: tuple[int, ...]
    strides: list[tuple[int, ...]]  # per array given to ``coalesce``, on ``dims``


def coalesce(domain: Sequence[int], arrays: Sequence[np.ndarray], segments: Sequence[int]) -> _Layout:
    """Merge the axes of ``domain`` (split into consecutive ``segments`` of axis counts)
    that every array -- broadcast to ``domain`` -- steps through as one."""
    strides = [np.broadcast_to(a, domain).strides for a in arrays]
    dims, merged, ranks, first = [], [[] for _ in arrays], [], 0
    for count in segments:
        seg_dims, seg_strides = [], [[] for _ in arrays]
        for k in reversed(range(first, first + count)):  # innermost first
            if domain[k] == 1:
                continue
            if seg_dims and all(s[k] == st[0] * seg_dims[0] for s, st in zip(strides, seg_strides)):
                seg_dims[0] *= domain[k]
                continue
            seg_dims.insert(0, domain[k])
            for s, st in zip(strides, seg_strides):
                st.insert(0, s[k])
        if not seg_dims:  # a segment of size-1 axes (or none): one axis of extent 1
            seg_dims = [1]
            seg_strides = [[0] for _ in arrays]
        dims += seg_dims
        for m, st in zip(merged, seg_strides):
            m += st
        ranks.append(len(seg_dims))
        first += count
    return _Layout(tuple(dims), tuple(ranks), [tuple(m) for m in merged])


def _operands(arrays: list[np.ndarray], strides: list[tuple[int, ...]], layout: _Layout,
              outputs: list[np.ndarray], names: list[str]) -> tuple[tuple[Operand, ...], list[np.ndarray]]:
    """How the kernel reads each input, and the views it is passed: an input that is one
    of the ``outputs`` (same array) is read through that output's parameter (``names``);
    any other over the layout axes it spans (stride != 0)."""
    operands, views = [], []
    for a, st in zip(arrays, strides):
        alias = next((name for o, name in zip(outputs, names) if o is a), None)
        if alias is not None:
            operands.append(Operand((), alias))
            continue
        axes = tuple(k for k, s in enumerate(st) if s != 0 and layout.dims[k] > 1)
        operands.append(Operand(axes))
        if axes:
            views.append(np.lib.stride_tricks.as_strided(a, [layout.dims[k] for k in axes], [st[k] for k in axes]))
        else:
            views.append(np.lib.stride_tricks.as_strided(a, (1,), (a.itemsize,)))
    return tuple(operands), views


def _full(a: np.ndarray, layout: _Layout, strides: tuple[int, ...]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(a, layout.dims, strides)


# --- programs ---------------------------------------------------------------------------------
@dataclass
class Fusion:
    """The program of a fused step and the arrays it reads and writes."""

    program: Program
    operands: list[np.ndarray]
    outputs: list[np.ndarray]  # arrays of the program's outputs (a norm's input: none)
    packs: list[np.ndarray] = field(default_factory=list)  # the scalar constants, one array per dtype


def _program(graph: Graph, step: Step, arrays: dict[Ref, np.ndarray], anchor_result: np.ndarray | None,
             outputs: list[np.ndarray]) -> Fusion:
    ops: list[ScalarOp] = []
    operands: list[np.ndarray] = []
    packs: dict[np.dtype, list] = {}  # dtype -> scalar constants
    op_of: dict[Ref, int] = {}
    leaf_of: dict[int, int] = {}  # id(array) -> op

    def leaf(a: np.ndarray) -> int:
        if id(a) not in leaf_of:
            ops.append(ScalarOp(LEAF, (len(operands),), DType.of(a.dtype)))
            operands.append(a)
            leaf_of[id(a)] = len(ops) - 1
        return leaf_of[id(a)]

    def value(r: Ref) -> int:
        """The op reading value ``r``: a scalar constant from its pack, else a leaf."""
        a = arrays[r]
        if graph.nodes[r.node].kind != "constant" or a.size != 1:
            return leaf(a)
        if id(a) not in leaf_of:
            pack = packs.setdefault(a.dtype, [])
            ops.append(ScalarOp(CONSTANT, (list(packs).index(a.dtype), len(pack)), DType.of(a.dtype)))
            pack.append(a.reshape(()))
            leaf_of[id(a)] = len(ops) - 1
        return leaf_of[id(a)]

    if step.anchor is not None:
        op_of[Ref(step.anchor.id)] = leaf(anchor_result)
        if step.anchor.kind == "conv" and len(step.anchor.inputs) == 3:  # + bias[c] per channel
            bias = arrays[step.anchor.inputs[2]]
            rank = step.anchor.shape.rank
            ops.append(ScalarOp("add", (op_of[Ref(step.anchor.id)], leaf(bias.reshape((-1,) + (1,) * (rank - 2)))),
                                step.anchor.shape.dtype))
            op_of[Ref(step.anchor.id)] = len(ops) - 1
    for n in step.elementwise:
        args = tuple(op_of[r] if r in op_of else value(r) for r in n.inputs)
        ops.append(scalar_op(graph, n, args))
        op_of[Ref(n.id)] = len(ops) - 1
    stored = [r for r in step.outputs if step.norm is None or r.node != step.norm.id]
    written = [op_of[r] for r in stored]
    if step.norm is not None:
        written.append(op_of[step.norm.inputs[0]])
    return Fusion(Program(tuple(ops), tuple(written)), operands, outputs[:len(stored)],
                  [np.array(values, dtype) for dtype, values in packs.items()])


# --- calls ----------------------------------------------------------------------------------
def elementwise_call(fusion: Fusion, domain: tuple[int, ...]) -> Call | None:
    """The generated kernel computing ``fusion`` over ``domain`` (None: nothing to do)."""
    if 0 in domain:
        return None
    arrays = fusion.operands + fusion.outputs
    layout = coalesce(domain, arrays, [len(domain)])
    n_in = len(fusion.operands)
    outs = [_full(a, layout, s) for a, s in zip(fusion.outputs, layout.strides[n_in:])]
    operands, ins = _operands(fusion.operands, layout.strides[:n_in], layout, fusion.outputs,
                              [f"o{k}" for k in range(len(outs))])
    source = elementwise_source(fusion.program, operands, len(layout.dims))
    args = tuple(ins) + tuple(fusion.packs) + tuple(outs)
    return Call(specialize(generated_kernel(source), *args), args)


def rows_call(fusion: Fusion, norm: Node, gamma: np.ndarray, beta: np.ndarray | None, buf: np.ndarray,
              y: np.ndarray) -> Call | None:
    """The generated kernel computing ``fusion`` and normalizing its last output into ``y``
    (``norm`` gives the kind, axis and eps). None when nothing is to be done, or when
    gamma/beta cannot be read as flat arrays (then the caller falls back)."""
    domain, axis = y.shape, norm.attrs["axis"]
    if 0 in domain:
        return None
    cols = int(np.prod(domain[axis:]))
    try:
        flat_gamma = np.reshape(gamma, (cols,), copy=False)
        flat_beta = flat_gamma if beta is None else np.reshape(beta, (cols,), copy=False)
    except ValueError:
        return None
    arrays = fusion.operands + fusion.outputs + [y]
    layout = coalesce(domain, arrays, [axis, len(domain) - axis])
    n_in = len(fusion.operands)
    outs = [_full(a, layout, s) for a, s in zip(arrays[n_in:], layout.strides[n_in:])]
    names = [f"o{k}" for k in range(len(fusion.outputs))] + ["y"]
    operands, ins = _operands(fusion.operands, layout.strides[:n_in], layout, fusion.outputs + [y], names)
    lead, trail = layout.segment_ranks
    source = rows_source(fusion.program, operands, lead, trail, norm.kind, beta is not None)
    args = tuple(ins) + tuple(fusion.packs) + tuple(outs[:-1]) + \
        (flat_gamma, flat_beta, buf, float(norm.attrs["eps"]), outs[-1])
    return Call(specialize(generated_kernel(source), *args), args)


def fused_scratch(step: Step, graph: Graph) -> list[Shape]:
    """A norm's row buffer; the anchor's result when no output can hold it; conv's own."""
    from .conv import conv_scratch
    scratch = []
    if step.norm is not None:
        x = graph.shape_of(step.norm.inputs[0])
        scratch.append(Shape((int(np.prod(x.dims[step.norm.attrs["axis"]:])),), x.dtype))
    if step.anchor is not None:
        if _anchor_target(step, graph) == "scratch":
            scratch.append(step.anchor.shape)
        if step.anchor.kind == "conv":
            scratch += conv_scratch(step.anchor, graph)
    return scratch


def _anchor_target(step: Step, graph: Graph) -> int | str | None:
    """Where the anchor writes its result: the index of an output of the same dims and
    dtype, "scratch" (none fits), or None (a conv that leaves it in its own scratch)."""
    from .conv import result_in_scratch
    if step.anchor.kind == "conv" and result_in_scratch(step.anchor, graph):
        return None
    fits = [i for i, r in enumerate(step.outputs) if graph.shape_of(r) == step.anchor.shape]
    return fits[-1] if fits else "scratch"  # the last: a norm's output, when it fits


@kernel(FUSED, scratch=fused_scratch)
def fused_step(b: Bound):
    step, graph = b.step, b.graph
    arrays = dict(zip(step.inputs, b.ins))
    if step.anchor is None and step.norm is None and len(step.elementwise) == 1:
        node = step.elementwise[0]
        calls = direct_calls(node, [arrays[r] for r in node.inputs], b.outs[0])
        if calls is not None:
            return calls
    from .conv import Epilogue, absorbed_step, conv_calls
    if absorbed_step(step, graph):  # conv + bias + relu in the conv's kernel
        anchor = step.anchor
        bias = arrays[anchor.inputs[2]] if len(anchor.inputs) > 2 else None
        return conv_calls(anchor, graph, arrays[anchor.inputs[0]], arrays[anchor.inputs[1]], b.outs[0], b.scratch,
                          Epilogue(bias, True))[0]
    scratch = list(b.scratch)
    buf = scratch.pop(0) if step.norm is not None else None
    calls, anchor_result = [], None
    if step.anchor is not None:
        target = _anchor_target(step, graph)
        out = scratch.pop(0) if target == "scratch" else (b.outs[target] if target is not None else None)
        calls, anchor_result = _anchor_calls(step.anchor, graph, [arrays[r] for r in step.anchor.inputs[:2]], out,
                                             scratch)
    fusion = _program(graph, step, arrays, anchor_result, b.outs)
    if step.norm is None:
        call = elementwise_call(fusion, step.domain)
        return calls + ([call] if call is not None else [])
    norm = step.norm
    gamma = arrays[norm.inputs[1]]
    beta = arrays[norm.inputs[2]] if len(norm.inputs) > 2 else None
    call = rows_call(fusion, norm, gamma, beta, buf, b.outs[-1])
    if call is None and 0 not in b.outs[-1].shape:
        return None  # gamma/beta not flat: the reference computes the step (see Step.nodes)
    return calls + ([call] if call is not None else [])


def _anchor_calls(anchor: Node, graph: Graph, ins: list[np.ndarray], out: np.ndarray | None,
                  scratch: list[np.ndarray]) -> tuple[list[Call], np.ndarray]:
    """The anchor's calls and the array holding its result."""
    from .conv import conv_calls
    from .linalg import matmul_calls
    if anchor.kind == "matmul":
        return matmul_calls(ins[0], ins[1], out), out
    return conv_calls(anchor, graph, ins[0], ins[1], out, scratch)


# --- fused or not: measured -------------------------------------------------------------------
def split_unprofitable(graph: Graph, steps: list[Step]) -> list[Step]:
    """``steps`` with each measured group that runs faster as separate ufunc calls split
    into single-node steps (see the module docstring)."""
    out = []
    for s in steps:
        if _measurable(graph, s) and _faster_unfused(graph, s):
            out += [Step(FUSED, (n,), n.inputs, (Ref(n.id),), elementwise=(n,)) for n in s.elementwise]
        else:
            out.append(s)
    return out


def _measurable(graph: Graph, s: Step) -> bool:
    if s.kind != FUSED or s.anchor is not None or s.norm is not None or len(s.elementwise) < 2:
        return False
    if int(np.prod(s.domain)) < MEASURE_MIN_ELEMENTS:
        return False
    return all(direct_calls(n, [np.empty((), graph.shape_of(r).dtype.np) for r in n.inputs],
                            np.empty((), n.shape.dtype.np)) is not None for n in s.elementwise)


def _sample(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    """Typical data (positive floats of order 1, small integers) to time kernels on."""
    if shape.dtype.is_bool:
        return rng.random(shape.dims) < 0.5
    if shape.dtype.is_int:
        return rng.integers(1, 8, shape.dims).astype(shape.dtype.np)
    return rng.uniform(0.5, 1.5, shape.dims).astype(shape.dtype.np)


def _faster_unfused(graph: Graph, s: Step) -> bool:
    rng = np.random.default_rng(0)
    values = {r: _sample(graph.shape_of(r), rng) for r in s.inputs}
    fused_outs = [np.empty(graph.shape_of(r).dims, graph.shape_of(r).dtype.np) for r in s.outputs]
    fusion = _program(graph, s, values, None, fused_outs)
    key = hashlib.sha256(repr((fusion.program, [(a.shape, a.dtype.str) for a in fusion.operands],
                               s.domain)).encode()).hexdigest()[:24]

    def measure() -> str:
        fused = [elementwise_call(fusion, s.domain)]
        separate = []
        for n in s.elementwise:
            values[Ref(n.id)] = np.empty(n.shape.dims, n.shape.dtype.np)
            separate += direct_calls(n, [values[r] for r in n.inputs], values[Ref(n.id)])
        return "unfused" if _seconds(separate) < 0.9 * _seconds(fused) else "fused"
    return choice(_decisions, key, measure, valid=("fused", "unfused").__contains__) == "unfused"


def _seconds(calls: list[Call], reps: int = 10) -> float:
    """The best of 3 timings of ``reps`` runs of ``calls`` (after one warm-up run)."""
    best = float("inf")
    for batch in range(4):
        t0 = time.perf_counter()
        for _ in range(reps if batch else 1):
            for c in calls:
                c.fn(*c.args, **c.kwargs)
        if batch:
            best = min(best, (time.perf_counter() - t0) / reps)
    return best

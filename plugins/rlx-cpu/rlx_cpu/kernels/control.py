"""Control flow (``if``, ``while``, ``scan``) run inside the enclosing run.

Each body -- a branch, a loop's condition and body -- is compiled once (per subgraph)
into an executable of its own and bound straight to fixed arrays
(``CpuExecutable.bind``): its straight-line run reads its inputs from them and writes
its outputs into them, so an iteration is one call of a generated function, with no
input dict, no lock, no output allocation and no per-op dispatch:

* ``if`` -- both branches read the operands where they are and write the node's
  outputs; the step calls one of the two runs.
* ``while`` / ``scan`` -- the carried values live in two sets of arrays, and the body
  is bound twice: reading set 0 and writing set 1, and the other way round, so
  iterations alternate between the two bindings and carry nothing over by copying.
  A value the body returns unchanged (a captured operand) keeps one array. A scan
  copies each step's slices of ``xs`` into the body's inputs and its ``y_t`` outputs
  into the stacked outputs. A ``while`` whose condition only returns one of the
  carried values (as ONNX Loop's does) reads that value instead of running it.

Random numbers: a body that draws them runs under ``rng.fold_in(i)`` (``i`` the
iteration, 0 for ``if``), as the ops define; other bodies skip the fold.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from rlx_core import Graph, Ref
from rlx_core.reference.kernels import KERNELS as REFERENCE_KERNELS

from ..load import machine_load
from . import Bound, Call, kernel

__all__ = ["draws_random"]

CONTROL = frozenset({"if", "while", "scan"})
UNROLLED_STEPS = 256  # scans this short run as one straight-line run (``_unrolled_scan``)


def draws_random(graph: Graph) -> bool:
    """Whether ``graph`` (its subgraphs included) has a node reading the run's rng."""
    return any(k not in CONTROL and k in REFERENCE_KERNELS and REFERENCE_KERNELS[k].context
               for k in graph.kinds())


class _Binding:
    """One body bound to fixed arrays: ``run(state)`` for a machine state, then ``copies``."""

    def __init__(self, exe, inputs: list[np.ndarray], outputs: list[np.ndarray]):
        self.arrays = (inputs, outputs)
        runs, self.copies = exe.bind(inputs, outputs)
        self.runs = {state: runs.get(state) for state in ("quiet", "loaded")}


def _usable_in_place(a: np.ndarray) -> bool:
    """Whether a body may read ``a`` where it is (the layouts its kernels were planned for)."""
    return a.flags.c_contiguous and a.flags.aligned


def _copy_all(pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    for dst, src in pairs:
        np.copyto(dst, src)


@kernel("if")
def if_step(b: Bound):
    cond, operands = b.ins[0], b.ins[1:]
    ctx, attrs = b.ctx, b.node.attrs
    inputs, copy_in = [], []
    for a in operands:
        if not _usable_in_place(a):
            own = np.empty(a.shape, a.dtype)
            copy_in.append((own, a))
            a = own
        inputs.append(a)
    branches = []
    for graph in (attrs["else_branch"], attrs["then_branch"]):
        exe = ctx.body(graph)
        branches.append((exe, _Binding(exe, inputs, b.outs), draws_random(graph)))
    flag = np.reshape(cond, (), copy=False)
    sensor = machine_load()

    def run_if():
        _copy_all(copy_in)
        exe, bound, draws = branches[bool(flag)]
        if draws:
            exe.rng = ctx.rng.fold_in(0)
        bound.runs[sensor.state()](None)
        _copy_all(bound.copies)
    return Call(run_if)


class _Carried:
    """A loop body bound to two sets of carried arrays (see the module docstring).

    ``body`` takes ``carried + extra`` inputs and returns ``carried + results``;
    ``extra`` and ``results`` are arrays shared by both bindings."""

    def __init__(self, ctx, graph: Graph, carried: list[np.ndarray], extra: list[np.ndarray],
                 results: list[np.ndarray]):
        n = len(carried)
        inputs = [Ref(node.id) for node in graph.input_nodes]
        same = [graph.outputs[k] == inputs[k] for k in range(n)]  # returned unchanged
        first = [np.empty(a.shape, a.dtype) for a in carried]
        second = [a if keep else np.empty(a.shape, a.dtype) for a, keep in zip(first, same)]
        self.sets = (first, second)
        self.exe = ctx.body(graph)
        self.bindings = (_Binding(self.exe, first + extra, second + results),
                         _Binding(self.exe, second + extra, first + results))

    def condition(self, ctx, graph: Graph) -> tuple[Callable[[int, str], bool], object]:
        """``holds(which, state)``: whether ``graph`` (the while condition) is true for
        carried set ``which``; and its executable (None when it is not run)."""
        inputs = [Ref(node.id) for node in graph.input_nodes]
        if graph.outputs[0] in inputs:  # it returns a carried value: read it
            k = inputs.index(graph.outputs[0])
            flags = [np.reshape(s[k], (), copy=False) for s in self.sets]
            return (lambda which, state: bool(flags[which])), None
        exe = ctx.body(graph)
        out = np.empty(graph.output_shapes[0].dims, graph.output_shapes[0].dtype.np)
        flag = np.reshape(out, (), copy=False)
        bindings = [_Binding(exe, list(s), [out]) for s in self.sets]

        def holds(which: int, state: str) -> bool:
            bound = bindings[which]
            bound.runs[state](None)
            _copy_all(bound.copies)
            return bool(flag)
        return holds, exe


@kernel("while")
def while_step(b: Bound):
    ctx, attrs = b.ctx, b.node.attrs
    loop = _Carried(ctx, attrs["body"], b.ins, [], [])
    holds, cond_exe = loop.condition(ctx, attrs["cond"])
    folded = [e for e, g in ((loop.exe, attrs["body"]), (cond_exe, attrs["cond"]))
              if e is not None and draws_random(g)]
    limit = attrs["max_iterations"]
    sets, bindings, sensor = loop.sets, loop.bindings, machine_load()

    def run_while():
        _copy_all(zip(sets[0], b.ins))
        state = sensor.state()
        i = which = 0
        while limit is None or i < limit:
            for exe in folded:
                exe.rng = ctx.rng.fold_in(i)
            if not holds(which, state):
                break
            bound = bindings[which]
            bound.runs[state](None)
            _copy_all(bound.copies)
            which ^= 1
            i += 1
        _copy_all(zip(b.outs, sets[which]))
    return Call(run_while)


@kernel("scan")
def scan_step(b: Bound):
    ctx, attrs = b.ctx, b.node.attrs
    nc, graph = attrs["num_carry"], attrs["body"]
    carry_in, xs = b.ins[:nc], b.ins[nc:]
    carry_out, ys = b.outs[:nc], b.outs[nc:]
    x_now = [np.empty(x.shape[1:], x.dtype) for x in xs]
    y_now = [np.empty(y.shape[1:], y.dtype) for y in ys]
    loop = _Carried(ctx, graph, carry_in, x_now, y_now)
    length = xs[0].shape[0]
    order = range(length - 1, -1, -1) if attrs["reverse"] else range(length)
    # each step's copies: its slices of xs into the body, its results into the stacked ys (views,
    # also of 1-D arrays: x[t, ...], not the scalar x[t])
    used = {r for n in graph.nodes for r in n.inputs} | set(graph.outputs)
    read = [k for k, n in enumerate(graph.input_nodes[nc:]) if Ref(n.id) in used]  # the slices the body reads
    steps = [([(x_now[k], xs[k][t, ...]) for k in read], list(zip((y[t, ...] for y in ys), y_now))) for t in order]
    draws = draws_random(graph)
    sets, bindings, sensor = loop.sets, loop.bindings, machine_load()
    if not draws and length <= UNROLLED_STEPS:
        return _unrolled_scan(loop, steps, carry_in, carry_out, sensor)

    def run_scan():
        _copy_all(zip(sets[0], carry_in))
        state = sensor.state()
        which = 0
        for i, (x_copies, y_copies) in enumerate(steps):
            if draws:
                loop.exe.rng = ctx.rng.fold_in(i)
            _copy_all(x_copies)
            bound = bindings[which]
            bound.runs[state](None)
            _copy_all(bound.copies)
            _copy_all(y_copies)
            which ^= 1
        _copy_all(zip(carry_out, sets[which]))
    return Call(run_scan)


def _unrolled_scan(loop: "_Carried", steps: list, carry_in: list, carry_out: list, sensor) -> Call:
    """A scan of at most ``UNROLLED_STEPS`` steps as ONE straight-line run: every step's
    input-slice copies, body calls (of the binding its parity reads) and output copies in
    order, so a step costs its calls and nothing around them (``run_scan``'s loop, its
    binding lookups and copy loops in Python). With the copies it saves (see below and
    ``CpuExecutable.bound_steps``), the exported GRU's 32 steps went from 158 to about
    140 us; onnxruntime's fused GRU takes about 80."""
    bodies = [loop.exe.bound_steps(*binding.arrays) for binding in loop.bindings]
    calls: list = []
    for i, (x_copies, y_copies) in enumerate(steps):
        body, copies = bodies[i % 2]
        # a y_t the body copies into its result array goes straight from where it is to ys[t]
        into = {id(dst): src for dst, src in copies}
        ys = [(dst, into.get(id(src), src)) for dst, src in y_copies]
        skipped = {id(src) for _, src in y_copies if id(src) in into}
        calls.append((None, [Call(np.copyto, pair) for pair in x_copies]))
        calls += body
        calls.append((None, [Call(np.copyto, pair) for pair in copies + ys if id(pair[0]) not in skipped]))
    runs = loop.exe.runs_of(calls)
    sets = loop.sets

    def run_unrolled():
        _copy_all(zip(sets[0], carry_in))
        runs.get(sensor.state())(None)
        _copy_all(zip(carry_out, sets[len(steps) % 2]))
    return Call(run_unrolled)

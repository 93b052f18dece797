"""CpuExecutable: a fused schedule, a planned arena, and a generated straight-line run.

Compilation: ``schedule`` groups nodes into steps (fusion), measured groups that run
faster unfused are split again, ``plan_memory`` turns movement steps into views and
places every other value in one arena, and each step's builder binds its kernels to
its buffers. The bound calls are then written out as the body of one Python function
(``f3(a7, a8, out=a9)`` ...) whose names are closure variables: a run is a sequence of
direct calls with no loop, no dict lookup and no shape check per op.

There is one such function per machine state (``rlx_cpu.load``: quiet or loaded),
differing in how BLAS calls use the cores (``rlx_cpu.threads``); a run reads the state
and calls its function. A run copies the inputs into the arena, runs that function
and copies the outputs out. With ``out=`` arrays the outputs are copied into them, and
once the same arrays come back the run is specialized to compute straight into them (a
variant of the run, generated like the first and kept for the next runs), so a
steady-state ``run(..., out=...)`` allocates no tensor memory. Generating a variant costs
about as much as 70 plain runs, so fresh arrays on every run never pay it, and a caller
cycling through more array sets than are kept pays it at most once per
``_VARIANT_EVERY`` runs. Runs on one executable are serialized by a lock (the arena is
shared state).

Backend options (``CompileOptions(backend={...})``): ``arena_alignment`` (bytes, default
64) and ``fusion`` (default on, except when tracing: a traced executable runs every
node as its own step, so that the trace attributes time to ops).
"""
from __future__ import annotations

import functools
import threading
import time
import weakref
from collections import OrderedDict
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlx_core import Graph, Ref
from rlx_core.reference import RefContext
from rlx_core.runtime import CompileOptions, ExecutableGraph, Tracer

from . import jit
from .adaptive import AdaptiveRun
from .backend import CAPABILITIES
from .kernels import Bound, Call, build_calls, scratch_shapes
from .kernels.fused import split_unprofitable
from .load import LOADED, QUIET, machine_load
from .plan import Scratch, plan_memory
from .schedule import schedule
from .threads import OWN_THREADS, blas_threads, multi_threaded, plan_blas_call, single_threaded

__all__ = ["CpuExecutable", "DEFAULT_ALIGNMENT"]

DEFAULT_ALIGNMENT = 64
BLAS_CALLS = (np.matmul,)  # calls whose use of the cores ``threads.plan_blas_call`` decides
_OUT_VARIANTS = 4  # out= buffer sets remembered per executable
_VARIANT_EVERY = 256  # beyond the first _OUT_VARIANTS, at most one variant generated per this many out= runs


class CpuExecutable(ExecutableGraph):
    """One graph compiled for the CPU (see the module docstring)."""

    capabilities = CAPABILITIES

    def __init__(self, graph: Graph, options: CompileOptions, extra_kernels: Mapping[str, Any]):
        self.graph = graph
        self.options = options
        self._extra = dict(extra_kernels)
        self._alignment = int(options.backend.get("arena_alignment", DEFAULT_ALIGNMENT))
        fuse = bool(options.backend.get("fusion", not options.tracing))
        steps = split_unprofitable(graph, schedule(graph, overridden=self._extra, fuse=fuse))
        scratch = [[] if s.kind in self._extra else scratch_shapes(s, graph) for s in steps]
        self.plan = plan_memory(graph, steps, scratch, self._alignment)
        self._instantiate(options.rng, {})

    def clone(self) -> "CpuExecutable":
        """A copy sharing the compiled schedule, memory plan and kernels (nothing is
        scheduled, measured or jitted again), with its own arena, params (copied from
        this one's) and bound runs; control-flow bodies compiled so far are cloned too."""
        twin = object.__new__(CpuExecutable)
        twin.graph, twin.options, twin._extra, twin._alignment, twin.plan = \
            self.graph, self.options, self._extra, self._alignment, self.plan
        with self._lock:
            twin._instantiate(self.rng, {key: sub.clone() for key, sub in self._subexec.items()})
            for name, value in self._params.items():
                twin._write_param(name, value)
        return twin

    def _instantiate(self, rng, subexec: dict) -> None:
        """What each executable owns over the (shareable) plan: its arena and param
        buffers, its runs bound to them, its lock, rng and control-flow bodies."""
        self.rng = rng
        self._lock = threading.Lock()
        self._subexec: dict[int, CpuExecutable] = subexec
        self._ctx = _StepContext(self)
        self._tracer = Tracer(self.graph.name, "cpu") if self.options.tracing else None
        self.arena = _aligned_bytes(self.plan.size, self._alignment)
        self._buffers = self._bind_buffers()
        arrays = self._bind_views(self._buffers)
        self._params = {n.attrs["name"]: arrays[Ref(n.id)] for n in self.graph.param_nodes}
        self._packings = self._bind_packings(arrays)
        for packings in self._packings.values():
            for pack in packings:
                pack()
        self._outputs = [arrays[r] for r in self.graph.outputs]
        self._load = machine_load()
        self._runs = _Runs(self._steps_of(arrays), self._tracer)
        self._direct = self._direct_outputs()
        self._variants: OrderedDict[tuple[int, ...], tuple[list[np.ndarray], _Runs, list]] = OrderedDict()
        # out= sets seen once (weakly: a caller's fresh arrays are not kept alive), and the budget
        self._sightings: OrderedDict[tuple[int, ...], list[weakref.ref]] = OrderedDict()
        self._out_runs = self._variant_builds = 0

    @property
    def steps(self):
        """The steps of the compiled schedule (fused groups, single nodes), in run order."""
        return self.plan.steps

    # --- binding ----------------------------------------------------------------------------
    def _bind_buffers(self) -> dict:
        """Arrays for every value and scratch that owns bytes: arena slices, params, constants."""
        buffers: dict = {}
        for node in self.graph.nodes:
            for i, shape in enumerate(node.outputs):
                if node.kind == "param":
                    buffers[Ref(node.id, i)] = np.zeros(shape.dims, shape.dtype.np)
                elif node.kind == "constant":
                    buffers[Ref(node.id, i)] = node.attrs["value"]
        for key, p in self.plan.placements.items():
            shape = self.graph.shape_of(key) if isinstance(key, Ref) else self.plan.scratch[key.step][key.index]
            raw = self.arena[p.offset:p.offset + p.nbytes]
            buffers[key] = raw.view(shape.dtype.np).reshape(shape.dims)
        for ref in self.plan.packed:
            shape = self.graph.shape_of(ref)
            buffers[ref] = np.empty(shape.dims, shape.dtype.np)
        return buffers

    def _bind_packings(self, arrays: dict) -> dict[str | None, list[Callable[[], None]]]:
        """The refills of the packed values (``rlx_cpu.plan``), by the param they are taken
        from (None: a constant, filled once)."""
        packings: dict[str | None, list[Callable[[], None]]] = {}
        for ref, (source, take) in self.plan.packed.items():
            node = self.graph.nodes[self.plan.root(source).node]
            name = node.attrs["name"] if node.kind == "param" else None
            packings.setdefault(name, []).append(functools.partial(_pack, arrays[ref], arrays[source], take))
        return packings

    def _bind_views(self, buffers: dict) -> dict:
        """``buffers`` plus every view value, taken (in graph order) of the value it views."""
        arrays = dict(buffers)
        for node in self.graph.nodes:
            for i in range(len(node.outputs)):
                view = self.plan.views.get(Ref(node.id, i))
                if view is not None:
                    source, take = view
                    arrays[Ref(node.id, i)] = take(arrays[source])
        return arrays

    def _calls(self, arrays: dict) -> list[tuple[str, list[Call]]]:
        """Every step's bound calls, labelled."""
        out = []
        for i, step in enumerate(self.plan.steps):
            ins = [arrays[r] for r in step.inputs]
            outs = [arrays[r] for r in step.outputs]
            if step.kind in self._extra:
                calls = [Call(_extra_kernel_call(self._extra[step.kind], step.node.attrs, ins, outs))]
            else:
                scratch = [arrays[Scratch(i, k)] for k in range(len(self.plan.scratch[i]))]
                calls = build_calls(Bound(step, self.graph, ins, outs, scratch, self._ctx))
            out.append((step.label, calls))
        return out

    def _steps_of(self, arrays: dict) -> list[tuple[str | None, list[Call]]]:
        """A run's calls: the input copies, then every step's."""
        copies = [Call(np.copyto, (arrays[Ref(n.id)], _Feed(n.attrs["name"]))) for n in self.graph.input_nodes]
        return [(None, copies)] + self._calls(arrays)

    # --- out= buffers ---------------------------------------------------------------------
    def _direct_outputs(self) -> list[bool]:
        """Which outputs a run may compute straight into the caller's ``out=`` array:
        values a step writes (not inputs, params, constants or views), at their first
        place in the outputs (a later place gets a copy of it)."""
        produced = {r for s in self.plan.steps for r in s.outputs}
        return [r in produced and r not in self.graph.outputs[:i] for i, r in enumerate(self.graph.outputs)]

    def _direct_into(self, out: Sequence[np.ndarray]) -> tuple[dict, list[bool]]:
        """The values computed straight into arrays of ``out`` (C-contiguous, aligned, at a
        direct place), and for each output whether it was."""
        taken = [ok and o.flags.c_contiguous and o.flags.aligned for o, ok in zip(out, self._direct)]
        return {r: o for r, o, t in zip(self.graph.outputs, out, taken) if t}, taken

    def _variant(self, out: Sequence[np.ndarray]) -> tuple[_Runs, list[tuple[np.ndarray, np.ndarray]]]:
        """The runs writing into ``out`` directly where they can, and the copies left to do:
        the plain run and a copy of every output until ``out`` is seen again and the
        generation budget allows a variant (see the module docstring)."""
        key = tuple(map(id, out))
        self._out_runs += 1
        hit = self._variants.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], out)):
            self._variants.move_to_end(key)
            return hit[1], hit[2]
        if not self._seen_before(key, out) or \
                self._variant_builds >= _OUT_VARIANTS + self._out_runs // _VARIANT_EVERY:
            return self._runs, [(o, src) for o, src in zip(out, self._outputs)]
        self._variant_builds += 1
        direct, taken = self._direct_into(out)
        arrays = self._bind_views({**self._buffers, **direct})
        runs = _Runs(self._steps_of(arrays), self._tracer)
        copies = [(o, arrays[r]) for r, o, t in zip(self.graph.outputs, out, taken) if not t]
        self._variants[key] = (list(out), runs, copies)
        if len(self._variants) > _OUT_VARIANTS:
            self._variants.popitem(last=False)
        return runs, copies

    def _seen_before(self, key: tuple[int, ...], out: Sequence[np.ndarray]) -> bool:
        """Whether these very arrays came before (ids alone could be reused by new arrays);
        remembers them otherwise."""
        refs = self._sightings.pop(key, None)
        if refs is not None and all(r() is o for r, o in zip(refs, out)):
            return True
        self._sightings[key] = [weakref.ref(o) for o in out]
        if len(self._sightings) > 2 * _OUT_VARIANTS:
            self._sightings.popitem(last=False)
        return False

    def bind(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
             ) -> tuple["_Runs", list[tuple[np.ndarray, np.ndarray]]]:
        """Runs of this graph that read its inputs straight from ``inputs`` (no copies in)
        and write its outputs straight into ``outputs`` where they can (C-contiguous,
        aligned, a value a step writes), and the ``(dst, src)`` copies left to do after
        each run: how control flow puts a body into the enclosing run. The runs share
        this executable's arena: run one binding at a time."""
        steps, copies = self.bound_steps(inputs, outputs)
        return self.runs_of(steps), copies

    def bound_steps(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
                    ) -> tuple[list[tuple[str | None, list[Call]]], list[tuple[np.ndarray, np.ndarray]]]:
        """``bind``'s calls, labelled by step, before they become runs (a scan strings
        several bindings' calls into one run)."""
        buffers = dict(self._buffers)
        buffers.update({Ref(n.id): a for n, a in zip(self.graph.input_nodes, inputs)})
        direct, taken = self._direct_into(outputs)
        buffers.update(direct)
        arrays = self._bind_views(buffers)
        copies = [(o, arrays[r]) for r, o, t in zip(self.graph.outputs, outputs, taken) if not t and o is not arrays[r]]
        return self._calls(arrays), copies

    def runs_of(self, steps: list[tuple[str | None, list[Call]]]) -> "_Runs":
        """The runs (per machine state) of labelled calls made inside an enclosing run."""
        return _Runs(steps, self._tracer, nested=True)

    # --- ExecutableGraph ------------------------------------------------------------------
    def set_param(self, name: str, value: np.ndarray) -> None:
        with self._lock:
            self._write_param(name, value)

    def _write_param(self, name: str, value: np.ndarray) -> None:
        np.copyto(self._params[name], value)
        for pack in self._packings.get(name, ()):
            pack()

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        with self._lock:
            state = self._load.state()
            if out is None:
                self._runs.get(state)(inputs)
                return [o.copy() for o in self._outputs]
            runs, copies = self._variant(out)
            runs.get(state)(inputs)
            for dst, src in copies:
                np.copyto(dst, src)
            return list(out)

    def subgraph(self, graph: Graph) -> "CpuExecutable":
        """The executable of a control-flow body, compiled once per subgraph."""
        exe = self._subexec.get(id(graph))
        if exe is None:
            exe = CpuExecutable(graph, CompileOptions(rng=self.rng, backend=self.options.backend), self._extra)
            self._subexec[id(graph)] = exe
        exe.rng = self.rng
        return exe


class _Runs:
    """A run's bound calls, and the function generated from them for each machine state
    (``rlx_cpu.load``): the states differ in how BLAS calls use the cores. Where a
    state's plan puts some BLAS call on several cores, its run is an ``AdaptiveRun``
    between that plan and one with every BLAS call on one thread. ``nested``: the runs of
    a control-flow body, called from inside the enclosing run (whose numpy warnings are
    already silenced)."""

    def __init__(self, steps: list[tuple[str | None, list[Call]]], tracer: Tracer | None, nested: bool = False):
        self._steps, self._tracer, self._nested = steps, tracer, nested
        self._by_state = {state: self._generate(state) for state in (QUIET, LOADED)}

    def get(self, state: str) -> Callable[[Mapping[str, np.ndarray]], None]:
        return self._by_state[state]

    def _generate(self, state: str) -> Callable[[Mapping[str, np.ndarray]], None]:
        planned = self._planned(lambda c: plan_blas_call(c, state))
        run = straight_line(planned, self._tracer, self._nested)
        single = self._planned(single_threaded)
        if _multi_core(planned, single):
            return AdaptiveRun([run, straight_line(single, self._tracer, self._nested)])
        multi = self._planned(multi_threaded) if state == QUIET else planned
        if _multi_core(multi, planned):  # a stored one-thread plan is checked at run time too
            return AdaptiveRun([run, straight_line(multi, self._tracer, self._nested)])
        return run

    def _planned(self, plan: Callable[[Call], Call]) -> list[tuple[str | None, list[Call]]]:
        """The steps with every BLAS call as ``plan`` makes it."""
        return [(label, [plan(c) if c.fn in BLAS_CALLS else c for c in calls]) for label, calls in self._steps]


def _multi_core(plan: list[tuple[str | None, list[Call]]], other: list[tuple[str | None, list[Call]]]) -> bool:
    """Whether ``plan`` runs some BLAS call on more cores than ``other`` does."""
    return any(p.threads == OWN_THREADS and q.threads != OWN_THREADS or p.fn is not q.fn
               for (_, ps), (_, qs) in zip(plan, other) for p, q in zip(ps, qs))


class _Feed:
    """Placeholder argument: the run's input called ``name``."""

    def __init__(self, name: str):
        self.name = name


def straight_line(steps: list[tuple[str | None, list[Call]]], tracer: Tracer | None = None, nested: bool = False
                  ) -> Callable[[Mapping[str, np.ndarray]], None]:
    """One function ``run(feeds)`` making every call in order, its arguments bound as
    closure variables (``_Feed`` arguments read ``feeds[name]``). BLAS calls switch
    OpenBLAS's thread count where their ``threads`` differs from the current one (and
    OpenBLAS's own counts are restored at the end); a call with ``stall_after`` is timed
    and reported to ``rlx_cpu.load`` when it takes longer. numpy floating-point warnings
    are silenced around the body when it makes numpy calls (inf and NaN are defined
    results, as in the reference) unless ``nested`` (the caller runs it silenced);
    with a tracer, every labelled step is a span."""
    names: dict[int, str] = {}
    bound: dict[str, Any] = {}

    def name_of(obj) -> str:
        if isinstance(obj, _Feed):
            return f"feeds[{obj.name!r}]"
        if obj is None or isinstance(obj, (bool, int, str)):
            return repr(obj)
        if id(obj) not in names:
            names[id(obj)] = f"v{len(names)}"
            bound[names[id(obj)]] = obj
        return names[id(obj)]

    control = blas_threads()
    threads, switched = OWN_THREADS, False
    body, numpy_calls = [], False
    for label, calls in steps:
        lines = []
        for c in calls:
            if control is not None and c.threads is not None and c.threads != threads:
                threads, switched = c.threads, True
                lines.append(f"{name_of(control.apply)}({threads})")
            args = [name_of(a) for a in c.args] + [f"{k}={name_of(v)}" for k, v in c.kwargs.items()]
            call = f"{name_of(c.fn)}({', '.join(args)})"
            if c.stall_after is None:
                lines.append(call)
            else:
                clock = name_of(time.perf_counter)
                lines += [f"t = {clock}()", call,
                          f"if {clock}() - t > {c.stall_after!r}: {name_of(machine_load().report_stall)}()"]
            numpy_calls |= not (jit.is_compiled(c.fn) or _cannot_warn(c))
        if tracer is not None and label is not None:
            lines = [f"with span({label!r}):"] + ["    " + line for line in lines]
        body += lines
    if tracer is not None:
        bound["span"] = tracer.span
        body.append(f"{name_of(tracer.end_run)}()")
    if switched:  # give OpenBLAS its own counts back, whatever happens
        body = ["try:"] + ["    " + line for line in body] + ["finally:", f"    {name_of(control.restore)}()"]
    if numpy_calls and not nested:
        bound["errstate"] = np.errstate
        body = ["with errstate(all='ignore'):"] + ["    " + line for line in body]
    params = ", ".join(bound)
    source = f"def make({params}):\n    def run(feeds):\n" + \
        "".join(f"        {line}\n" for line in body or ["pass"]) + "    return run\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, "<rlx-cpu run>", "exec"), namespace)
    return namespace["make"](*bound.values())  # by keyword, CPython matches names in O(n^2)


def _cannot_warn(call: Call) -> bool:
    """A numpy call that raises no floating-point warning: a copy within one dtype (a run's
    inputs are checked to have their declared dtype)."""
    if call.fn is not np.copyto or call.kwargs:
        return False
    dst, src = call.args
    return isinstance(src, _Feed) or (isinstance(src, np.ndarray) and src.dtype == dst.dtype)


def _extra_kernel_call(fn, attrs, ins, outs) -> Callable[[], None]:
    """A plugin-provided kernel ``fn(*inputs, **attrs) -> array(s)``, copied into the outputs."""
    def step():
        res = fn(*ins, **attrs)
        for dst, src in zip(outs, res if isinstance(res, (tuple, list)) else [res]):
            np.copyto(dst, src)
    return step


class _StepContext(RefContext):
    """What kernels see at run time: the executable's current rng, and subgraphs that
    run on the CPU backend (not on the reference interpreter)."""

    def __init__(self, exe: CpuExecutable):
        super().__init__()
        self._exe = exe

    @property
    def rng(self):
        return self._exe.rng

    @rng.setter
    def rng(self, value):  # RefContext's constructor assigns it; the executable owns it
        pass

    def body(self, graph: Graph) -> CpuExecutable:
        """``graph`` (a control-flow body) compiled for the CPU, once per executable."""
        return self._exe.subgraph(graph)

    def run_subgraph(self, graph: Graph, args, rng=None):
        sub = self._exe.subgraph(graph)
        if rng is not None:
            sub.rng = rng
        return sub.run({n.attrs["name"]: a for n, a in zip(graph.input_nodes, args)})


def _pack(dst: np.ndarray, source: np.ndarray, take: Callable[[np.ndarray], np.ndarray]) -> None:
    np.copyto(dst, take(source))


def _aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """A zeroed uint8 buffer of ``nbytes`` whose first byte is ``alignment``-aligned."""
    raw = np.zeros(nbytes + alignment, np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift:shift + nbytes]

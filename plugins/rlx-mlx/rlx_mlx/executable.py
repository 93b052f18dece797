"""Programs (a graph lowered to MLX, shared through the backend's cache) and the
executables that run them with their own params.

A :class:`Program` holds one :class:`GraphFunction` per (sub)graph. A function without
control-flow nodes at its top level is traced once and run under ``mx.compile`` (MLX
fuses its elementwise chains into single kernels). One with control nodes is cut at
them: each run of nodes between two control nodes is a :class:`Segment`, compiled with
``mx.compile`` on its own; the ``if``/``while``/``scan`` between them are decided on the
host and their bodies run as functions of their own (see ``lowering.control``).

Data flow of a run: params are MLX arrays from ``set_param`` on (copied once, never
again); numpy inputs are copied into MLX arrays by the call (MLX takes no foreign
memory); outputs come back as numpy arrays viewing MLX's buffers (no copy; read-only),
into the caller's ``out=`` arrays (one copy), or -- with
``CompileOptions(backend={"outputs": "mlx"})`` -- as the MLX arrays themselves,
evaluation started (``mx.async_eval``) but not waited for.
"""
from __future__ import annotations

import contextlib
import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any, Mapping, Sequence

import numpy as np

from rlx_core.errors import InputError
from rlx_core.ir import Graph
from rlx_core.rng import RngOptions
from rlx_core.runtime import CompileOptions, ExecutableGraph, Pending, Tracer

from .lowering import (CONTROL_KINDS, RNG_KINDS, LowerContext, _lower_node, from_numpy, mx_dtype, to_numpy,
                       trace_graph, trace_nodes)
from .lowering.random import RngState, host_draws
from .platform import jit_lock

__all__ = ["Program", "GraphFunction", "Segment", "MlxExecutable", "OUTPUT_KINDS", "GPU_RUNS"]

OUTPUT_KINDS = ("numpy", "mlx")
# Runs on MLX's GPU one thread at a time: MLX's CUDA command encoder is not safe to use from
# several threads at once (concurrent runs aborted the process on the H200).
GPU_RUNS = threading.RLock()


class GraphFunction:
    """One (sub)graph as a function of MLX arrays: ``fn(args, rng) -> outputs``, ``args``
    in the order of the graph's input and param nodes, less those ``skip`` names (values
    MLX cannot hold, which no op of the graph reads); ``outputs`` are the refs returned
    (default: the graph's outputs)."""

    def __init__(self, graph: Graph, program: "Program", skip=frozenset(), outputs=None):
        self.graph = graph
        self.program = program
        self.outputs = list(graph.outputs) if outputs is None else list(outputs)
        bound = [n for n in graph.nodes if n.kind in ("input", "param") and n.attrs["name"] not in skip]
        self.names = [n.attrs["name"] for n in bound]
        self.specs = [(tuple(n.attrs["dims"]), n.attrs["dtype"]) for n in bound]
        self.rng_nodes = [n for n in graph.nodes if n.kind in RNG_KINDS]
        self.hosted = any(n.kind in CONTROL_KINDS for n in graph.nodes)
        self.compiled = program.compile and not self.hosted
        self.steps = _steps(self) if self.hosted and program.compile else None
        self._traced: dict[str, Any] = {}  # rng mode -> mx.compile'd trace
        self._built: set[str] = set()  # rng modes whose fused kernels MLX has built (first evaluation done)
        self._draws: tuple[RngOptions | None, list] = (None, [])

    def __call__(self, args: Sequence[Any], rng: RngOptions) -> list[Any]:
        import mlx.core as mx
        mode = rng.mode
        seed = mx.array(np.uint64(rng.seed))
        draws = self._host_draws(rng) if mode == "ort" and self.rng_nodes else []
        if self.steps is not None:
            return self._run_steps(list(args), seed, draws, rng)
        if not self.compiled:
            return self._trace(list(args), seed, self.program.zero, draws, mode=mode, host=rng)
        return _first_run_locked(self, mode, self._function(mode), (list(args), seed, self.program.zero, draws))

    def _function(self, mode: str):
        fn = self._traced.get(mode)
        if fn is None:
            import mlx.core as mx
            fn = self._traced[mode] = mx.compile(partial(self._trace, mode=mode, host=None))
        return fn

    def _context(self, mode, seed, zero, by_node, host) -> LowerContext:
        rng = RngState(mode, seed, zero, by_node, host, self.program.device_kind == "gpu")
        return LowerContext(self.program.device_kind, rng, self.program.extra, None, self.program.run_subgraph)

    def _trace(self, args, seed, zero, draws, *, mode, host):
        by_node = {n.id: d for n, d in zip(self.rng_nodes, draws)}
        ctx = self._context(mode, seed, zero, by_node, host)
        return trace_graph(self.graph, dict(zip(self.names, args)), ctx, self.outputs)

    def _run_steps(self, args, seed, draws, rng: RngOptions) -> list[Any]:
        """A hosted graph: its segments (compiled) and control nodes (on the host) in order."""
        by_node = {n.id: d for n, d in zip(self.rng_nodes, draws)}
        ctx = self._context(rng.mode, seed, self.program.zero, by_node, rng)
        values = {(n.id, 0): a for n, a in zip(self.bound_nodes, args)}
        for step in self.steps:
            if isinstance(step, Segment):
                step(values, seed, by_node, rng.mode)
            else:
                outs = _lower_node(step, [values[tuple(r)] for r in step.inputs], ctx)
                values.update(((step.id, i), out) for i, out in enumerate(outs))
        return [values[tuple(r)] for r in self.outputs]

    @property
    def bound_nodes(self) -> list:
        return [n for n in self.graph.nodes if n.kind in ("input", "param") and n.attrs["name"] in self.names]

    def _host_draws(self, rng: RngOptions) -> list:
        seen, draws = self._draws
        if seen != rng:
            draws = host_draws(rng, self.rng_nodes)
            self._draws = (rng, draws)
        return draws

    def placeholders(self) -> list:
        """Arrays of the arguments' dims and dtypes, never evaluated (for a dry trace)."""
        import mlx.core as mx
        return [mx.zeros(dims, mx_dtype(dt)) for dims, dt in self.specs]


class Segment:
    """A run of consecutive nodes of a hosted graph with no control node among them,
    compiled as one ``mx.compile`` function: it reads the values ``reads`` (made before
    it) and gives ``gives`` (the values later nodes or the outputs use)."""

    def __init__(self, owner: GraphFunction, nodes: list, reads: list, gives: list):
        self.owner = owner
        self.program = owner.program
        self.nodes = nodes
        self.reads = reads
        self.gives = gives
        self.rng_nodes = [n for n in nodes if n.kind in RNG_KINDS]
        self._traced: dict[str, Any] = {}
        self._built: set[str] = set()

    def __call__(self, values: dict, seed, by_node: dict, mode: str) -> None:
        draws = [by_node[n.id] for n in self.rng_nodes] if mode == "ort" else []
        args = ([values[r] for r in self.reads], seed, self.program.zero, draws)
        values.update(zip(self.gives, _first_run_locked(self, mode, self._function(mode), args)))

    def _function(self, mode: str):
        fn = self._traced.get(mode)
        if fn is None:
            import mlx.core as mx
            fn = self._traced[mode] = mx.compile(partial(self._trace, mode=mode))
        return fn

    def _trace(self, args, seed, zero, draws, *, mode):
        by_node = {n.id: d for n, d in zip(self.rng_nodes, draws)}
        values = dict(zip(self.reads, args))
        trace_nodes(self.nodes, values, self.owner._context(mode, seed, zero, by_node, None))
        return [values[r] for r in self.gives]

    def placeholders(self) -> list:
        import mlx.core as mx
        shapes = [self.owner.graph.shape_of(r) for r in self.reads]
        return [mx.zeros(s.dims, mx_dtype(s.dtype)) for s in shapes]


def _steps(fn: GraphFunction) -> list:
    """``fn``'s graph as steps: :class:`Segment` s between its control nodes, which stay
    nodes (run on the host). Segments whose values nobody uses are dropped."""
    graph = fn.graph
    body = [n for n in graph.nodes if n.kind not in ("input", "param")]
    last_use: dict[tuple, float] = {}
    for position, node in enumerate(body):
        for r in node.inputs:
            last_use[tuple(r)] = position
    for r in fn.outputs:
        last_use[tuple(r)] = float("inf")
    steps, run, start = [], [], 0
    for position, node in enumerate(body + [None]):
        if node is not None and node.kind not in CONTROL_KINDS:
            if not run:
                start = position
            run.append(node)
            continue
        if run:
            made = {(n.id, i) for n in run for i in range(len(n.outputs))}
            reads = list(dict.fromkeys(tuple(r) for n in run for r in n.inputs if tuple(r) not in made))
            gives = [ref for ref in sorted(made) if last_use.get(ref, -1) >= start + len(run)]
            if gives:
                steps.append(Segment(fn, run, reads, gives))
            run = []
        if node is not None:
            steps.append(node)
    return steps


def _first_run_locked(owner, mode: str, fn, args) -> list:
    """``fn(*args)``; its first evaluation on MLX's CPU device, where MLX builds the fused
    kernels, under the host-wide :func:`~rlx_mlx.platform.jit_lock`."""
    if mode in owner._built or owner.program.device_kind != "cpu":
        return fn(*args)
    import mlx.core as mx
    with jit_lock():
        outputs = fn(*args)
        mx.eval(outputs)
    owner._built.add(mode)
    return outputs


class Program:
    """One graph lowered to MLX for one MLX device, shared by every executable of an
    equal graph (see ``MlxBackend``). ``compile=False`` runs it op by op (no
    ``mx.compile``; the ``compile`` backend option)."""

    def __init__(self, graph: Graph, device, extra: Mapping[str, Any], compile: bool = True,
                 host_dtypes=frozenset()):
        import mlx.core as mx
        self.graph = graph
        self.device = device
        self.device_kind = "gpu" if device.type == mx.gpu else "cpu"
        self.extra = dict(extra)
        self.compile = compile
        self.param_names = tuple(graph.param_names)
        self.input_names = tuple(graph.input_names)
        self.zero = mx.array(0, mx.uint32)  # a run-time zero (see lowering.random)
        self._functions: dict[int, GraphFunction] = {}
        # Inputs and params of dtypes MLX lacks (complex128; float64 on a GPU) stay on the
        # host: legalize lets no op read them, so they can only be outputs themselves.
        held = {n.id: n.attrs["name"] for n in graph.nodes
                if n.kind in ("input", "param") and n.attrs["dtype"] in host_dtypes}
        self.host_names = frozenset(held.values())
        self.host_outputs = {i: held[r.node] for i, r in enumerate(graph.outputs) if r.node in held}
        device_outputs = [r for i, r in enumerate(graph.outputs) if i not in self.host_outputs]
        self.main = GraphFunction(graph, self, self.host_names, device_outputs)
        self._order = [self.main.names.index(n) if n in self.main.names else None
                       for n in self.param_names + self.input_names]
        self.lock = threading.RLock()
        self._dry_trace(self.main)

    def function(self, graph: Graph) -> GraphFunction:
        fn = self._functions.get(id(graph))
        if fn is None:
            fn = self._functions[id(graph)] = GraphFunction(graph, self)
            self._dry_trace(fn)
        return fn

    def _dry_trace(self, fn: GraphFunction) -> None:
        """Trace a compiled function now on placeholder arguments (nothing is evaluated), so
        that lowering errors belong to compile time; subgraphs of hosted functions too."""
        import mlx.core as mx
        if fn.hosted:
            for node in fn.graph.nodes:
                if node.kind in CONTROL_KINDS:
                    for attr in ("then_branch", "else_branch", "cond", "body"):
                        if attr in node.attrs:
                            self.function(node.attrs[attr])
            with mx.stream(self.device):
                for step in fn.steps or ():
                    if isinstance(step, Segment):
                        step._function("philox")(step.placeholders(), mx.array(np.uint64(0)), self.zero, [])
            return
        if fn.compiled:
            with mx.stream(self.device):
                fn._function("philox")(fn.placeholders(), mx.array(np.uint64(0)), self.zero, [])

    def run_subgraph(self, graph: Graph, args, iteration: int, rng: RngState) -> list:
        """A control-flow subgraph on ``args`` (cast to its input dtypes) under the run's
        options folded with ``iteration``."""
        fn = self.function(graph)
        args = [a if a.dtype == mx_dtype(dt) else a.astype(mx_dtype(dt)) for a, (_, dt) in zip(args, fn.specs)]
        return fn(args, rng.host.fold_in(iteration))

    def run(self, params: Sequence[Any], inputs: Sequence[Any], rng: RngOptions) -> list:
        """The outputs for ``params`` and ``inputs`` in declaration order: lazy MLX arrays,
        and host arrays (copies) for outputs that are host-held inputs or params."""
        import mlx.core as mx
        given = list(params) + list(inputs)
        args = [None] * len(self.main.names)
        held = {}
        for position, name, value in zip(self._order, self.param_names + self.input_names, given):
            if position is None:
                held[name] = value
            else:
                args[position] = value
        with self.lock, mx.stream(self.device):
            results = self.main(args, rng)
        if not self.host_outputs:
            return results
        results = iter(results)
        return [np.array(held[self.host_outputs[i]]) if i in self.host_outputs else next(results)
                for i in range(len(self.graph.outputs))]


class MlxExecutable(ExecutableGraph):
    """A program plus this compiled graph's params, rng options and output kind."""

    capabilities = frozenset({"clone", "gpu_handles", "typed_io", "async_pipeline", "out_buffers",
                              "fused_elementwise"})

    def __init__(self, program: Program, name: str, options: CompileOptions, outputs: str):
        self.program = program
        self.name = name
        self.outputs = outputs
        self.capabilities = MlxExecutable.capabilities if program.compile else \
            MlxExecutable.capabilities - {"fused_elementwise"}
        self._params: dict[str, Any] = {}
        self._param_args: tuple = ()
        self._tracer = Tracer(name, "mlx") if options.tracing else None
        self.set_rng(options.rng)

    # --- ExecutableGraph --------------------------------------------------------------
    def set_param(self, name: str, value: Any) -> None:
        import mlx.core as mx
        if name in self.program.host_names:  # a dtype MLX lacks, only ever returned: kept on the host
            self._params = {**self._params, name: np.array(value)}
            if len(self._params) == len(self.program.param_names):
                self._param_args = tuple(self._params[n] for n in self.program.param_names)
            return
        uploaded = self._to_mlx(f"param '{name}'", value)
        with GPU_RUNS if self.program.device_kind == "gpu" else contextlib.nullcontext(), \
                mx.stream(self.program.device):
            mx.eval(uploaded)
        self._params = {**self._params, name: uploaded}
        if len(self._params) == len(self.program.param_names):
            self._param_args = tuple(self._params[n] for n in self.program.param_names)

    def set_rng(self, rng: RngOptions) -> None:
        self.rng = rng

    def run(self, inputs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        if self.program.device_kind != "gpu":
            return self._run(inputs, out)
        with GPU_RUNS:
            return self._run(inputs, out)

    def _run(self, inputs: Mapping[str, Any], out: Sequence[np.ndarray] | None) -> list[Any]:
        import mlx.core as mx
        held = self.program.host_names
        feeds = [inputs[name] if name in held else self._to_mlx(f"input '{name}'", inputs[name])
                 for name in self.program.input_names]
        if self._tracer is not None:
            with self._tracer.span(f"{self.name} (one MLX program)", "program"):
                results = self.program.run(self._param_args, feeds, self.rng)
                mx.eval([r for r in results if isinstance(r, mx.array)])
            self._tracer.end_run()
        else:
            results = self.program.run(self._param_args, feeds, self.rng)
        on_device = [r for r in results if isinstance(r, mx.array)]
        if self.outputs == "mlx" and out is None:
            mx.async_eval(on_device)
            return list(results)
        mx.eval(on_device)
        if out is not None:
            for dst, res in zip(out, results):
                np.copyto(dst, res if isinstance(res, np.ndarray) else to_numpy(res))
            return list(out)
        return self._returned(results)

    def submit(self, inputs: Mapping[str, Any]) -> Pending:
        """``mx.async_eval``: the run's graph is built and queued on MLX's stream, and a
        waiter thread waits for it (MLX cannot be polled), so ``done`` is that wait's end.
        Numpy inputs are copied into MLX arrays (or, for values MLX cannot hold, copied)."""
        if self._tracer is not None:  # a traced run waits for its program: no queue to keep
            return super().submit(inputs)
        import mlx.core as mx
        held = self.program.host_names
        with GPU_RUNS if self.program.device_kind == "gpu" else contextlib.nullcontext():
            feeds = [np.array(inputs[name]) if name in held else self._to_mlx(f"input '{name}'", inputs[name])
                     for name in self.program.input_names]
            results = self.program.run(self._param_args, feeds, self.rng)
            on_device = [r for r in results if isinstance(r, mx.array)]
            mx.async_eval(on_device)
        # mx.eval of arrays async_eval scheduled only waits for their events: no encoder use
        evaluated = _waiter().submit(mx.eval, on_device)

        def finish() -> list[Any]:
            evaluated.result()  # (raises what the evaluation raised)
            return self._returned(results)
        return Pending(evaluated.done, finish)

    def clone(self) -> "MlxExecutable":
        """A copy running the same program. Its params start as this one's MLX arrays,
        which no run writes (``set_param`` on either replaces its own entry), so they are
        shared without a copy until one side sets a new value."""
        twin = copy.copy(self)
        twin._tracer = Tracer(self.name, "mlx") if self._tracer is not None else None
        return twin

    def _returned(self, results) -> list[Any]:
        """Evaluated results as ``run`` returns them: MLX arrays, or read-only numpy views."""
        if self.outputs == "mlx":
            return list(results)
        return [r if isinstance(r, np.ndarray) else _read_only(to_numpy(r)) for r in results]

    # --- helpers ----------------------------------------------------------------------
    @staticmethod
    def _to_mlx(what: str, value: Any) -> Any:
        """A value as an MLX array: MLX arrays as they are (immutable), numpy copied, other
        array-likes read through ``__array__``."""
        import mlx.core as mx
        if isinstance(value, mx.array):
            return value
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value)
            except Exception as e:
                raise InputError(f"{what}: cannot read {type(value).__name__} as an array ({e}); "
                                 f"pass a numpy or MLX array") from None
        return from_numpy(value)


@lru_cache(maxsize=1)
def _waiter() -> ThreadPoolExecutor:
    """The one thread that waits for submitted runs, in submission order."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlx-mlx-wait")


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a

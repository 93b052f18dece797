"""Programs (a graph compiled by XLA, shared through the backend's cache) and the
executables that run them with their own params.

Data flow of a run: params live on the device from ``set_param`` on and are never
uploaded again; inputs may be numpy arrays (transferred by the call), JAX arrays (used
where they are) or any DLPack array (imported without a copy where the producer allows
it); outputs come back as numpy arrays, into the caller's ``out=`` arrays, or -- with
``CompileOptions(backend={"outputs": "jax"})`` -- as the JAX arrays themselves, still on
the device and not waited for.

Sharded programs (``CompileOptions(sharding=...)``, see :mod:`rlx_tpu.sharding`) take
the same path: ``set_param`` places each param's shards on their devices once, inputs
are split by the call (numpy) or moved to their sharding (JAX arrays placed otherwise),
and outputs come back gathered or, with ``outputs="sharded"``, as XLA leaves them
(numpy outputs are then assembled from the shards on the host).

Numpy outputs are what ``np.asarray`` makes of the results: a view of XLA:CPU's buffer,
one device-to-host copy elsewhere, read-only either way (``np.array(out)`` gives a
writable copy). Every run returns new arrays; none is ever overwritten by a later run.
"""
from __future__ import annotations

import contextlib
import copy
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from rlx_core.errors import InputError
from rlx_core.ir import Graph
from rlx_core.rng import RngOptions
from rlx_core.runtime import CompileOptions, ExecutableGraph, Pending, Tracer

from .lowering import LowerContext, draws_random, trace_graph
from .lowering.random import RngState
from .platform import x64
from .sharding import Placement

_DISPATCH: list = []  # the one dispatcher thread of numpy-input submits, made on first use
_DISPATCH_LOCK = threading.Lock()


def _dispatcher():
    """One worker thread for every executable: submits with numpy inputs are called in
    the order they were made (as XLA would have queued them)."""
    with _DISPATCH_LOCK:
        if not _DISPATCH:
            from concurrent.futures import ThreadPoolExecutor
            _DISPATCH.append(ThreadPoolExecutor(1, thread_name_prefix="rlx-tpu-dispatch"))
        return _DISPATCH[0]

__all__ = ["Program", "TpuExecutable", "OUTPUT_KINDS"]

OUTPUT_KINDS = ("numpy", "jax")
_WIDE = frozenset(np.dtype(t) for t in ("float64", "int64", "uint64", "complex128"))


class Program:
    """One graph lowered to JAX and compiled by XLA for one device or a mesh (``placement``).

    The program's arguments are the params and the inputs (tuples in the graph's
    declaration order) and, when the graph draws random numbers, the run's seed. The
    rng mode is part of the program, so each mode in use is compiled once: the first
    when the program is made, others on first use. Programs are immutable after that
    and shared by every executable of an equal graph (see ``TpuBackend``).
    """

    def __init__(self, graph: Graph, placement: Placement, extra_lowerings: Mapping[str, Any], rng_mode: str):
        import jax
        self.graph = graph
        self.placement = placement
        self.input_shardings = tuple(placement.inputs[name] for name in graph.input_names)
        # (name, sharding) per input in argument order: what each run walks, built once
        self.feeds = tuple(zip(graph.input_names, self.input_shardings))
        self.draws_random = draws_random(graph)
        self.param_names, self.input_names = tuple(graph.param_names), tuple(graph.input_names)
        # Runs need JAX's x64 mode only to pass or return 64-bit values (the seed is u64);
        # entering it costs a few microseconds per run, which a GPU launch waits for.
        io = [n.attrs["dtype"].np for n in graph.input_nodes] + [s.dtype.np for s in graph.output_shapes]
        self.run_scope = x64 if self.draws_random or _WIDE.intersection(io) else contextlib.nullcontext
        self._extra = dict(extra_lowerings)
        gathered = {} if placement.outputs is None else {"out_shardings": placement.outputs}
        self._traced = jax.jit(self._trace, static_argnames="mode", **gathered)
        self._compiled: dict[str | None, Any] = {}
        self._lock = threading.Lock()
        self.executable(rng_mode)  # compile now: errors belong to compile time

    def _trace(self, params, inputs, seed, mode):
        rng = RngState(mode, seed) if self.draws_random else None
        bound = dict(zip(self.param_names + self.input_names, params + inputs))
        return trace_graph(self.graph, bound, LowerContext(self.placement.platform, rng, self._extra))

    @property
    def compiled_modes(self) -> tuple[str, ...]:
        """The rng modes compiled so far (empty for a graph that draws nothing)."""
        return tuple(sorted(mode for mode in self._compiled if mode is not None))

    def executable(self, rng_mode: str):
        """The XLA executable for ``rng_mode`` (one for all modes when nothing is random)."""
        key = rng_mode if self.draws_random else None
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._lock, x64():
                compiled = self._compiled.get(key)
                if compiled is None:
                    compiled = self._traced.lower(*self._argument_specs(), mode=key).compile()
                    self._compiled[key] = compiled
        return compiled

    def _argument_specs(self):
        import jax
        where = self.placement

        def spec(node, shardings):
            return jax.ShapeDtypeStruct(tuple(node.attrs["dims"]), node.attrs["dtype"].np,
                                        sharding=shardings[node.attrs["name"]])
        params = tuple(spec(n, where.params) for n in self.graph.param_nodes)
        inputs = tuple(spec(n, where.inputs) for n in self.graph.input_nodes)
        seed = jax.ShapeDtypeStruct((), np.uint64, sharding=where.replicated) if self.draws_random else None
        return params, inputs, seed


class TpuExecutable(ExecutableGraph):
    """A program plus this compiled graph's params, rng seed and output kind."""

    capabilities = frozenset({"clone", "gpu_handles", "typed_io", "async_pipeline", "out_buffers", "dlpack",
                              "control_flow", "fused_elementwise", "sharding"})

    def __init__(self, program: Program, name: str, options: CompileOptions, outputs: str):
        self.program = program
        self.name = name  # this graph's, for traces (the program may be another equal graph's)
        self.outputs = outputs
        self._params: dict[str, Any] = {}
        self._param_args: tuple = ()
        self._seed = None
        self._tracer = Tracer(name, "tpu") if options.tracing else None
        self.set_rng(options.rng)

    # --- ExecutableGraph --------------------------------------------------------------
    def set_param(self, name: str, value: Any) -> None:
        import jax
        with x64():
            uploaded = jax.device_put(self._private(value), self.program.placement.params[name])
        self._params = {**self._params, name: uploaded}
        if len(self._params) == len(self.program.param_names):  # all set: the program's argument
            self._param_args = tuple(self._params[n] for n in self.program.param_names)

    def set_rng(self, rng: RngOptions) -> None:
        import jax
        self.rng = rng
        if self.program.draws_random:
            with x64():
                self._seed = jax.device_put(np.uint64(rng.seed), self.program.placement.replicated)

    def run(self, inputs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        program = self.program
        executable = program.executable(self.rng.mode)
        with program.run_scope():
            feeds = tuple([self._on_device(name, inputs[name], where) for name, where in program.feeds])
            if self._tracer is None:
                results = executable(self._param_args, feeds, self._seed)
            else:
                results = self._traced_call(executable, feeds)
        if out is not None:
            self._fetch(results)
            for dst, res in zip(out, results):
                np.copyto(dst, np.asarray(res))
            return list(out)
        return self._returned(results)

    def submit(self, inputs: Mapping[str, Any]) -> Pending:
        """XLA's async dispatch: the program is queued and its (new, immutable) arrays
        returned at once; ``done`` is their ``is_ready()``. Numpy inputs are copied first
        (XLA may read or alias a host array after the call returns), other DLPack arrays
        imported as copies; JAX arrays are immutable already. Numpy outputs have their
        device-to-host copies queued here, behind the program, so ``wait`` finds them
        under way (or done) instead of starting one transfer per result.

        JAX copies a numpy argument to the device synchronously inside the call (about
        0.4 ms on the H200 for the b1 block's input), so a submit with numpy inputs hands
        the call to one dispatcher thread (runs keep their submit order) and returns: the
        host's transfer of one run then overlaps the device's work on the run before."""
        if self._tracer is not None:  # a traced run waits for its program: no queue to keep
            return super().submit(inputs)
        feeds = [(self._captured(name, inputs[name]), where) for name, where in self.program.feeds]
        args = (self._param_args, self._seed, self.rng.mode)  # this submit's params and seed
        if not any(isinstance(value, np.ndarray) for value, _ in feeds):
            return self._queue(feeds, *args)
        dispatched = _dispatcher().submit(self._queue, feeds, *args)
        return Pending(lambda: dispatched.done() and dispatched.result().done(),
                       lambda: dispatched.result().wait())

    def _queue(self, feeds, param_args, seed, mode) -> Pending:
        """Call the program on captured ``feeds`` ((value, sharding) in input order)."""
        import jax
        program = self.program
        executable = program.executable(mode)
        with program.run_scope():
            placed = tuple([self._on_device(name, value, where)
                            for (name, _), (value, where) in zip(program.feeds, feeds)])
            try:
                results = executable(param_args, placed, seed)
            except Exception as e:  # XLA:CPU runs small programs inline: their failure is the run's
                return Pending.failed(e)
        if self.outputs == "jax":
            return Pending(lambda: all(r.is_ready() for r in results),
                           lambda: list(jax.block_until_ready(results)))
        self._fetch(results)
        return Pending(lambda: all(r.is_ready() for r in results), lambda: self._returned(results))

    def launch(self, feeds: Sequence[Any]) -> list[Any]:
        """The XLA program alone on ``feeds``: JAX arrays already placed as the program
        takes them, in the graph's input order. Nothing is checked, converted or waited
        for: the device execution that ``run`` wraps, which benchmarks measure ``run``
        against (``benchmarks/tpu_block.py``, ``benchmarks/run_split.py``)."""
        with self.program.run_scope():
            return list(self.program.executable(self.rng.mode)(self._param_args, tuple(feeds), self._seed))

    def clone(self) -> "TpuExecutable":
        """A copy running the same compiled program. Its params start as this one's device
        arrays, which XLA never writes (``set_param`` on either replaces its own entry),
        so they are shared without a copy until one side sets a new value."""
        twin = copy.copy(self)
        twin._tracer = Tracer(self.name, "tpu") if self._tracer is not None else None
        return twin

    def hlo(self) -> str:
        """The optimized HLO XLA compiled for this graph's rng mode: on a mesh, where the
        collectives the sharding implies (all-reduce, all-gather, ...) can be read."""
        return self.program.executable(self.rng.mode).as_text()

    # --- helpers ----------------------------------------------------------------------
    def _returned(self, results) -> list[Any]:
        """A run's results as it returns them: the JAX arrays, or numpy arrays."""
        if self.outputs == "jax":
            return list(results)
        if len(results) > 1:
            self._fetch(results)
        return [np.asarray(res) for res in results]

    @staticmethod
    def _fetch(results) -> None:
        """Queue every result's device-to-host copy at once (``np.asarray`` would start
        them one at a time, each after the one before had landed). A no-op on XLA:CPU,
        whose results numpy views in place. A run that failed says so at ``np.asarray``."""
        for res in results:
            try:
                res.copy_to_host_async()
            except Exception:  # the run's own error: raised where its values are read
                return

    def _captured(self, name: str, value: Any) -> Any:
        """An input no caller can change after ``submit`` returns."""
        import jax
        if isinstance(value, np.ndarray):
            return np.array(value)
        return value if isinstance(value, jax.Array) else self._import(f"input '{name}'", value, copy=True)

    def _traced_call(self, executable, feeds):
        import jax
        with self._tracer.span(f"{self.name} (one XLA program)", "program"):
            results = jax.block_until_ready(executable(self._param_args, feeds, self._seed))
        self._tracer.end_run()
        return results

    def _private(self, value: Any) -> Any:
        """A param value no caller can change afterwards: numpy arrays are copied for
        XLA:CPU (which would otherwise alias their memory; other platforms copy them to the
        device anyway), DLPack arrays imported as copies."""
        import jax
        if isinstance(value, np.ndarray):
            return np.array(value) if self.program.placement.platform == "cpu" else value
        if isinstance(value, jax.Array):
            return value  # immutable
        return self._import("param", value, copy=True)

    def _on_device(self, name: str, value: Any, where) -> Any:
        """An input as the program takes it: numpy as is (the call transfers or splits it),
        JAX arrays moved to the input's sharding ``where`` if placed otherwise, DLPack
        arrays imported."""
        if isinstance(value, np.ndarray):
            return value
        import jax
        if not isinstance(value, jax.Array):
            value = self._import(f"input '{name}'", value, copy=None)
            if isinstance(value, np.ndarray):  # a host array after all (see _import)
                return value
        sharding = value.sharding
        if sharding != where and not sharding.is_equivalent_to(where, value.ndim):
            value = jax.device_put(value, where)
        return value

    @staticmethod
    def _import(what: str, value: Any, copy: bool | None) -> Any:
        """A DLPack array as a JAX array. Strided producers that DLPack cannot describe
        compactly fall back to their ``__array__`` (host arrays such as torch CPU tensors)."""
        import jax
        try:
            return jax.dlpack.from_dlpack(value, copy=copy)
        except Exception as e:
            if hasattr(value, "__array__"):
                host = np.asarray(value)
                return host.copy() if copy else host
            raise InputError(f"{what}: cannot import {type(value).__name__} through DLPack ({e}); "
                             f"pass a numpy array or a contiguous device array") from None

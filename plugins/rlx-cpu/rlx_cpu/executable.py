"""CpuExecutable: a memory-planned arena plus a flat list of bound kernel steps."""
from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

import numpy as np

from rlx_core.ir import Graph, Ref
from rlx_core.reference import RefContext
from rlx_core.runtime import CompileOptions, ExecutableGraph, Tracer

from .kernels import build_step
from .plan import plan_memory

__all__ = ["CpuExecutable", "DEFAULT_ALIGNMENT"]

DEFAULT_ALIGNMENT = 64


class CpuExecutable(ExecutableGraph):
    """Runs one graph: inputs are copied into the arena, every step writes into
    planned buffers, outputs are copied out (or into the caller's ``out=`` arrays).
    A steady-state run therefore allocates no tensor memory when ``out=`` is given.
    Runs on one executable are serialized by a lock (the arena is shared state)."""

    capabilities = frozenset({"clone", "typed_io", "out_buffers", "control_flow"})

    def __init__(self, graph: Graph, options: CompileOptions, extra_kernels: Mapping[str, Any]):
        self.graph = graph
        self.options = options
        self.rng = options.rng
        self._extra = dict(extra_kernels)
        self._lock = threading.Lock()
        self._subexec: dict[int, CpuExecutable] = {}
        alignment = int(options.backend.get("arena_alignment", DEFAULT_ALIGNMENT))
        order = [n.id for n in graph.nodes if n.kind not in ("input", "param", "constant")]
        self.plan = plan_memory(graph, order, alignment)
        self.arena = _aligned_bytes(self.plan.size, alignment)
        arrays = self._bind_arrays()
        ctx = _StepContext(self)
        self._steps = [(graph.nodes[nid].label,
                        self._build(graph.nodes[nid], [arrays[r] for r in graph.nodes[nid].inputs],
                                    [arrays[Ref(nid, i)] for i in range(len(graph.nodes[nid].outputs))], ctx))
                       for nid in order]
        self._inputs = {n.attrs["name"]: arrays[Ref(n.id)] for n in graph.input_nodes}
        self._params = {n.attrs["name"]: arrays[Ref(n.id)] for n in graph.param_nodes}
        self._outputs = [arrays[r] for r in graph.outputs]
        self._tracer = Tracer(graph.name, "cpu") if options.tracing else None

    def _bind_arrays(self) -> dict[Ref, np.ndarray]:
        """One array per value: arena views, persistent param buffers, constants, aliases."""
        arrays: dict[Ref, np.ndarray] = {}
        for node in self.graph.nodes:
            for i, shape in enumerate(node.outputs):
                ref = Ref(node.id, i)
                if node.kind == "param":
                    arrays[ref] = np.zeros(shape.dims, shape.dtype.np)
                elif node.kind == "constant":
                    arrays[ref] = node.attrs["value"]
                elif ref in self.plan.aliases:
                    arrays[ref] = arrays[self.plan.aliases[ref]].reshape(shape.dims)
                else:
                    p = self.plan.placements[ref]
                    raw = self.arena[p.offset:p.offset + p.nbytes]
                    arrays[ref] = raw.view(shape.dtype.np).reshape(shape.dims)
        return arrays

    def _build(self, node, ins, outs, ctx):
        extra = self._extra.get(node.kind)
        if extra is not None:  # a plugin-provided kernel: fn(*inputs, **attrs) -> array(s)
            def step():
                res = extra(*ins, **node.attrs)
                for dst, src in zip(outs, res if isinstance(res, (tuple, list)) else [res]):
                    np.copyto(dst, src)
            return step
        return build_step(node, ins, outs, ctx)

    # --- ExecutableGraph ------------------------------------------------------------
    def set_param(self, name: str, value: np.ndarray) -> None:
        with self._lock:
            np.copyto(self._params[name], value)

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        with self._lock:
            for name, view in self._inputs.items():
                np.copyto(view, inputs[name])
            if self._tracer is None:
                for _, step in self._steps:
                    step()
            else:
                for label, step in self._steps:
                    with self._tracer.span(label):
                        step()
                self._tracer.end_run()
            if out is None:
                return [o.copy() for o in self._outputs]
            for dst, src in zip(out, self._outputs):
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

    def run_subgraph(self, graph: Graph, args, rng=None):
        sub = self._exe.subgraph(graph)
        if rng is not None:
            sub.rng = rng
        return sub.run({n.attrs["name"]: a for n, a in zip(graph.input_nodes, args)})


def _aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """A uint8 buffer of ``nbytes`` whose first byte is ``alignment``-aligned."""
    raw = np.empty(nbytes + alignment, np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift:shift + nbytes]

"""The CPU backend: compiles a graph into a flat execution plan over numbered slots."""
from __future__ import annotations

import os
import platform
from typing import Any, Mapping, Sequence

import numpy as np

from rlx_core.ir import Graph, all_schemas
from rlx_core.reference import RefContext, has_kernel, run_node
from rlx_core.rng import RngOptions
from rlx_core.runtime import Availability, Backend, CompileOptions, Device, ExecutableGraph, Tracer, registry

__all__ = ["CpuBackend", "CpuExecutable"]


class CpuBackend(Backend):
    name = "cpu"
    device = Device.CPU

    def is_available(self) -> Availability:
        return Availability(True, f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads",
                            {"machine": platform.machine(), "threads": os.cpu_count()})

    def supported_ops(self) -> Mapping[str, None]:
        # Every kind the reference defines, on every dtype its schema accepts.
        return {kind: None for kind in all_schemas() if has_kernel(kind)}

    def advisory_capabilities(self) -> frozenset[str]:
        return frozenset({"clone", "typed_io", "out_buffers", "control_flow"})

    def compile(self, graph: Graph, options: CompileOptions) -> "CpuExecutable":
        return CpuExecutable(graph, options, registry().op_kernels(self.name))


class CpuExecutable(ExecutableGraph):
    """Values live in a list of slots; each step reads and writes slots by index."""

    capabilities = frozenset({"clone", "typed_io", "out_buffers", "control_flow"})

    def __init__(self, graph: Graph, options: CompileOptions, extra_kernels: Mapping[str, Any]):
        self.graph = graph
        self.rng = options.rng
        self._extra = dict(extra_kernels)
        self._tracer = Tracer(graph.name, "cpu") if options.tracing else None
        slot_of: dict[tuple[int, int], int] = {}
        for node in graph.nodes:
            for i in range(len(node.outputs)):
                slot_of[(node.id, i)] = len(slot_of)
        self._slots: list[Any] = [None] * len(slot_of)
        self._feeds = {n.attrs["name"]: slot_of[(n.id, 0)] for n in graph.input_nodes}
        self._param_slots = {n.attrs["name"]: slot_of[(n.id, 0)] for n in graph.param_nodes}
        self._steps = [(node, [slot_of[r] for r in node.inputs],
                        [slot_of[(node.id, i)] for i in range(len(node.outputs))])
                       for node in graph.nodes if node.kind not in ("input", "param")]
        self._outputs = [slot_of[r] for r in graph.outputs]
        self._subexec: dict[int, CpuExecutable] = {}

    def set_param(self, name: str, value: np.ndarray) -> None:
        self._slots[self._param_slots[name]] = np.array(value, copy=True)

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        slots = list(self._slots)  # params stay; per-run values go into a fresh list
        for name, slot in self._feeds.items():
            slots[slot] = inputs[name]
        ctx = _CpuContext(self, self.rng)
        tracer = self._tracer
        for node, ins, outs in self._steps:
            args = [slots[i] for i in ins]
            if tracer is None:
                res = self._run_node(node, args, ctx)
            else:
                with tracer.span(node.label):
                    res = self._run_node(node, args, ctx)
            for slot, value in zip(outs, res):
                slots[slot] = value
        if tracer is not None:
            tracer.end_run()
        results = [slots[i] for i in self._outputs]
        if out is None:  # copies: an output may alias a param or an input
            return [np.array(r, copy=True) for r in results]
        for dst, src in zip(out, results):
            np.copyto(dst, src)
        return list(out)

    def _run_node(self, node, args, ctx):
        fn = self._extra.get(node.kind)
        if fn is not None:
            res = fn(*args, **node.attrs)
            return list(res) if isinstance(res, (tuple, list)) else [np.asarray(res)]
        return run_node(node, args, ctx)

    def subgraph(self, graph: Graph) -> "CpuExecutable":
        """Compiled executables for control-flow bodies, built once per subgraph."""
        exe = self._subexec.get(id(graph))
        if exe is None:
            exe = CpuExecutable(graph, CompileOptions(rng=self.rng), self._extra)
            self._subexec[id(graph)] = exe
        return exe


class _CpuContext(RefContext):
    """Kernel context whose subgraphs run on the CPU backend, not the reference."""

    def __init__(self, exe: CpuExecutable, rng: RngOptions):
        super().__init__(rng=rng)
        self._exe = exe

    def run_subgraph(self, graph: Graph, args):
        sub = self._exe.subgraph(graph)
        sub.rng = self.rng
        return sub.run({n.attrs["name"]: a for n, a in zip(graph.input_nodes, args)})

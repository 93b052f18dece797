"""WgpuExecutable: one graph compiled for one wgpu device.

Compiling schedules the graph into steps (fused elementwise groups, one kernel step per
other node, rng and control-flow steps), generates their WGSL, plans one arena for every
value, scratch and data region, uploads constants, and binds every dispatch to its
arena slices once. A run then writes the inputs, encodes every step into one command
encoder, copies the outputs into a mapped readback buffer and submits once (control flow
adds a submit per condition it reads).
"""
from __future__ import annotations

import threading
from typing import Mapping, Sequence

import numpy as np

from rlx_core.errors import DeviceError
from rlx_core.ir import Graph, Ref
from rlx_core.reference import RefContext, run_node
from rlx_core.runtime import CompileOptions, ExecutableGraph, Tracer

from .codegen import GENERATORS, KernelContext, fused_kernel
from .codegen.wgsl import WORKGROUP, grid, linear_id, shader, u32
from .control import CONTROL_KINDS
from .encoder import Encoder
from .layout import device_nbytes, from_device, to_device
from .plan import Item, plan
from .schedule import ALIAS_KINDS, FOLDED_KINDS, schedule
from .steps import FOREVER, RNG_KINDS, KernelStep, RngStep

__all__ = ["WgpuExecutable"]


class WgpuExecutable(ExecutableGraph):
    capabilities = frozenset({"fused_elementwise", "out_buffers", "control_flow"})

    def __init__(self, graph: Graph, options: CompileOptions, gpu):
        self.graph = graph
        self.options = options
        self.gpu = gpu
        self.rng = options.rng
        self._lock = threading.Lock()
        self._children: dict[int, WgpuExecutable] = {}
        self._aliases = {Ref(n.id): n.inputs[0] for n in graph.nodes if n.kind in ALIAS_KINDS}
        self._constants = {Ref(n.id): _constant_value(n) for n in graph.nodes
                           if n.kind == "constant" or n.kind in FOLDED_KINDS}
        self.steps = [self._step(i, s) for i, s in enumerate(schedule(graph, gpu.max_bindings))]
        self.host_writes = any(s.host_writes for s in self.steps)
        items = self._items()
        self._sizes = {it.key: it.nbytes for it in items}
        self._offsets, self.arena_bytes = plan(items, gpu.alignment)
        self.arena = gpu.storage_buffer(self.arena_bytes, f"arena of graph '{graph.name}'")
        for ref, value in self._constants.items():
            self.write(ref, to_device(value, graph.shape_of(ref).dtype))
        for step in self.steps:
            step.bind(self)
        self._params = {n.attrs["name"]: Ref(n.id) for n in graph.param_nodes}
        self._inputs = {n.attrs["name"]: Ref(n.id) for n in graph.input_nodes}
        self._readback, self._readback_at = self._readback_plan()
        self._tracer = Tracer(graph.name, gpu.profile.label) if options.tracing else None
        self.last_submits = 0  # queue submits of the latest run (1 unless control flow reads a condition)

    # --- compiling ----------------------------------------------------------------------------
    def _step(self, index: int, step):
        node = step.root
        if node.kind in CONTROL_KINDS:
            return CONTROL_KINDS[node.kind](index, node, self)
        k = KernelContext(self.graph, node, self.gpu, self.options.backend)
        if step.fused:
            fused_kernel(k, list(step.nodes))
            return KernelStep(index, step.nodes, k)
        GENERATORS[node.kind](k)
        return RngStep(index, node, k) if node.kind in RNG_KINDS else KernelStep(index, step.nodes, k)

    def _items(self) -> list[Item]:
        """Every region of the arena with its lifetime (see ``rlx_wgpu.plan``)."""
        first: dict[Ref, int] = {}
        last: dict[Ref, int] = {}
        for node in self.graph.nodes:
            if node.kind == "input":
                first[Ref(node.id)] = -1
        for step in self.steps:
            for ref in step.reads:
                root = self._root(ref)
                last[root] = max(last.get(root, -1), step.index)
            for ref in step.writes:
                first.setdefault(ref, step.index)
        for ref in self.graph.outputs:
            last[self._root(ref)] = FOREVER
        items = [Item(ref, device_nbytes(self.graph.shape_of(ref)), start, last.get(ref, start))
                 for ref, start in first.items() if ref not in self._constants]
        items += [Item(ref, device_nbytes(self.graph.shape_of(ref)), -1, FOREVER)
                  for ref in list(self._constants) + [Ref(n.id) for n in self.graph.param_nodes]]
        for step in self.steps:
            items += step.items()
        too_big = [it for it in items if it.nbytes > self.gpu.max_binding_bytes]
        if too_big:
            raise DeviceError(f"graph '{self.graph.name}': {len(too_big)} value(s) exceed this device's "
                              f"max-storage-buffer-binding-size {self.gpu.max_binding_bytes} bytes "
                              f"(largest: {max(it.nbytes for it in too_big)} bytes)")
        return items

    def _root(self, ref: Ref) -> Ref:
        while ref in self._aliases:
            ref = self._aliases[ref]
        return ref

    def _readback_plan(self):
        """The mapped buffer outputs are copied into, and each output's offset in it."""
        at, size = [], 0
        for ref in self.graph.outputs:
            at.append(size)
            size += -(-self.region(ref)[1] // 8) * 8  # mapped reads start at multiples of 8
        return self.gpu.readback_buffer(size), at

    def child(self, graph: Graph) -> "WgpuExecutable":
        """The executable of a control-flow body, compiled once per subgraph."""
        if id(graph) not in self._children:
            self._children[id(graph)] = WgpuExecutable(graph, self.options.with_(trace=False), self.gpu)
        return self._children[id(graph)]

    # --- regions --------------------------------------------------------------------------------
    def region(self, slot) -> tuple[int, int]:
        """``(offset, nbytes)`` of a value, scratch, data or seed region in the arena."""
        key = self._root(slot) if isinstance(slot, Ref) else slot
        return self._offsets[key], self._sizes[key]

    def bind_group(self, slots):
        entries = []
        for i, slot in enumerate(slots):
            offset, nbytes = self.region(slot)
            entries.append({"binding": i, "resource": {"buffer": self.arena, "offset": offset, "size": nbytes}})
        return self.gpu.device.create_bind_group(layout=self.gpu.bind_group_layout(len(slots)), entries=entries)

    def copy_dispatch(self, src, dst) -> tuple:
        """A bound kernel copying value ``src`` to value ``dst`` of this arena (WebGPU has no
        buffer copy within one buffer): ``(pipeline, bind_group, grid)`` for ``Encoder.dispatch``."""
        words = self.region(dst)[1] // 4
        body = f"  let i = {linear_id()};\n  if (i < {u32(words)}) {{ dst[i] = src[i]; }}"
        source = shader([("src", "u32"), ("dst", "u32")], body)
        return (self.gpu.pipeline(source, 2), self.bind_group([src, dst]),
                grid(words, WORKGROUP, self.gpu.limits["max-compute-workgroups-per-dimension"]))

    def write(self, slot, data: np.ndarray) -> None:
        self.gpu.device.queue.write_buffer(self.arena, self.region(slot)[0], data)

    def input_regions(self) -> list[tuple[int, int]]:
        return [self.region(Ref(n.id)) for n in self.graph.input_nodes]

    def output_regions(self) -> list[tuple[int, int]]:
        return [self.region(r) for r in self.graph.outputs]

    # --- running ----------------------------------------------------------------------------------
    def encode(self, ctx: Encoder) -> None:
        """Append this graph's steps to ``ctx`` (inputs must already be in place)."""
        if self.host_writes and id(self) in ctx.pending:
            ctx.flush()  # per-run data is written at encode time: keep the pending use intact
        for step in self.steps:
            if self._tracer is None:
                step.encode(self, ctx)
                continue
            with self._tracer.span(step.label):
                step.encode(self, ctx)
                ctx.wait()
        ctx.pending.add(id(self))

    def set_param(self, name: str, value: np.ndarray) -> None:
        ref = self._params[name]
        with self._lock:
            self.write(ref, to_device(value, self.graph.shape_of(ref).dtype))

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        with self._lock:
            for name, ref in self._inputs.items():
                self.write(ref, to_device(inputs[name], self.graph.shape_of(ref).dtype))
            ctx = Encoder(self.gpu)
            self.encode(ctx)
            for ref, at in zip(self.graph.outputs, self._readback_at):
                offset, nbytes = self.region(ref)
                ctx.copy(self.arena, offset, self._readback, at, nbytes)
            ctx.flush()
            self.last_submits = ctx.submits
            if self._tracer is not None:
                self._tracer.end_run()
            return self._read_outputs(out)

    def _read_outputs(self, out):
        buf = self._readback
        buf.map_sync(self.gpu.wgpu.MapMode.READ)
        try:
            raw = buf.read_mapped(copy=False)
            shapes = self.graph.output_shapes
            return [from_device(raw[at:at + self.region(ref)[1]], shape, None if out is None else out[i])
                    for i, (ref, at, shape) in enumerate(zip(self.graph.outputs, self._readback_at, shapes))]
        finally:
            buf.unmap()


def _constant_value(node) -> np.ndarray:
    """A constant's array, or a folded source op's value (its reference kernel's result)."""
    if node.kind == "constant":
        return node.attrs["value"]
    return run_node(node, [], RefContext())[0]

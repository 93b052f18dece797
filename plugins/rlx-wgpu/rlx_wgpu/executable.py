"""WgpuExecutable: one graph compiled for one wgpu device.

Compiling schedules the graph into steps (fused elementwise groups, one kernel step per
other node, rng and control-flow steps), generates their WGSL, plans one arena for every
value, scratch and data region, uploads constants, and binds every dispatch to its
arena slices once. A run then writes the inputs, encodes every step into one command
encoder, copies the outputs into a mapped readback buffer and submits once (control flow
adds a submit per condition it reads).

On a device opened with unified memory (``Gpu.unified_memory``: wgpu's
``mappable-primary-buffers`` on an adapter that shares the host's memory) the arena is
host-mappable: a run maps it to write the inputs in place, and maps it again after the
submit to read the outputs, with no staging buffer and no readback copy.

``overrides`` (``rlx_wgpu.api``): a callable ``(graph, node) -> kernel | None``; a node
it gives a kernel for runs on the host as a step of its own (see ``HostStep``).
"""
from __future__ import annotations

import threading
from typing import Mapping, Sequence

import numpy as np

from rlx_core.errors import DeviceError
from rlx_core.ir import Graph, Ref
from rlx_core.passes.fusion import value_lifetimes
from rlx_core.reference import RefContext, run_node
from rlx_core.runtime import CompileOptions, ExecutableGraph, Pending, Tracer

from .codegen import GENERATORS, KernelContext, fused_kernel
from .codegen.wgsl import WORKGROUP, grid, linear_id, shader, u32
from .control import CONTROL_KINDS
from .encoder import Encoder
from .gpu import is_software
from .layout import device_nbytes, from_device, to_device
from .plan import Item, plan
from .schedule import ALIAS_KINDS, FOLDED_KINDS, NO_STEP_KINDS, schedule
from .steps import FOREVER, RNG_KINDS, HostStep, KernelStep, RngStep

__all__ = ["WgpuExecutable"]


class WgpuExecutable(ExecutableGraph):
    capabilities = frozenset({"async_pipeline", "out_buffers", "control_flow", "fused_elementwise"})

    def __init__(self, graph: Graph, options: CompileOptions, gpu, overrides=None):
        self.graph = graph
        self.options = options
        self.gpu = gpu
        self.rng = options.rng
        self.overrides = overrides
        self._lock = threading.Lock()
        self._children: dict[int, WgpuExecutable] = {}
        self._aliases = {Ref(n.id): n.inputs[0] for n in graph.nodes if n.kind in ALIAS_KINDS}
        self._constants = {Ref(n.id): _constant_value(n) for n in graph.nodes
                           if n.kind == "constant" or n.kind in FOLDED_KINDS}
        self._host_kernels = self._overridden()
        steps = schedule(graph, gpu.max_bindings, unfused=frozenset(self._host_kernels))
        self.steps = [self._step(i, s) for i, s in enumerate(steps)]
        self.host_writes = any(s.host_writes for s in self.steps)
        items = self._items()
        self._sizes = {it.key: it.nbytes for it in items}
        self._offsets, self.arena_bytes = plan(items, gpu.alignment)
        self.mapped = bool(getattr(gpu, "unified_memory", False))  # the arena is host-mappable
        self.queues = queues(gpu.info, self.mapped)
        if not self.queues:
            self.capabilities = WgpuExecutable.capabilities - {"async_pipeline"}
        self.arena = gpu.storage_buffer(self.arena_bytes, f"arena of graph '{graph.name}'", mappable=self.mapped)
        for ref, value in self._constants.items():
            self.write(ref, to_device(value, graph.shape_of(ref).dtype))
        for step in self.steps:
            step.bind(self)
        self._params = {n.attrs["name"]: Ref(n.id) for n in graph.param_nodes}
        self._inputs = {n.attrs["name"]: Ref(n.id) for n in graph.input_nodes}
        self._readback, self._readback_at = self._readback_plan()
        self._spare: list = []  # readback buffers of waited submits, for the next ones
        self._tracer = Tracer(graph.name, gpu.profile.label) if options.tracing else None
        self.last_submits = 0  # queue submits of the latest run (1 unless control flow reads a condition)

    # --- compiling ----------------------------------------------------------------------------
    def _overridden(self) -> dict:
        """node id -> host kernel, for the nodes ``overrides`` takes over."""
        if self.overrides is None:
            return {}
        found = {}
        for node in self.graph.nodes:
            if node.kind in NO_STEP_KINDS or node.kind in ALIAS_KINDS or node.kind in CONTROL_KINDS:
                continue
            kernel = self.overrides(self.graph, node)
            if kernel is not None:
                found[node.id] = kernel
        return found

    def _step(self, index: int, step):
        node = step.root
        if node.id in self._host_kernels:
            return HostStep(index, node, self._host_kernels[node.id])
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
        first, last = value_lifetimes(self.graph, self.steps, self._root, FOREVER)
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
        """The mapped buffer outputs are copied into, and each output's offset in it
        (none on a mapped arena: outputs are read where they are)."""
        if self.mapped:
            return None, []
        at, size = [], 0
        for ref in self.graph.outputs:
            at.append(size)
            size += -(-self.region(ref)[1] // 8) * 8  # mapped reads start at multiples of 8
        return self.gpu.readback_buffer(size), at

    def child(self, graph: Graph) -> "WgpuExecutable":
        """The executable of a control-flow body, compiled once per subgraph."""
        if id(graph) not in self._children:
            self._children[id(graph)] = WgpuExecutable(graph, self.options.with_(trace=False), self.gpu,
                                                       self.overrides)
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

    def write_values(self, refs, values) -> None:
        """Host arrays into the regions of ``refs`` before the next submit: mapped in place
        on a mapped arena (the device must be idle: after a read), else queued writes."""
        data = [to_device(v, self.graph.shape_of(r).dtype) for r, v in zip(refs, values)]
        if not self.mapped:
            for ref, raw in zip(refs, data):
                self.write(ref, raw)
            return
        self.arena.map_sync(self.gpu.wgpu.MapMode.WRITE)
        try:
            for ref, raw in zip(refs, data):
                if raw.size:
                    self.arena.write_mapped(raw, self.region(ref)[0])
        finally:
            self.arena.unmap()

    def read_values(self, ctx: Encoder, refs, out=None) -> list[np.ndarray]:
        """The values of ``refs`` once all work encoded in ``ctx`` is done (submits it)."""
        shapes = [self.graph.shape_of(r) for r in refs]
        outs = out if out is not None else [None] * len(refs)
        if not self.mapped:
            return [from_device(ctx.read(self.arena, *self.region(r)), s, o) for r, s, o in zip(refs, shapes, outs)]
        ctx.flush()
        self.arena.map_sync(self.gpu.wgpu.MapMode.READ)
        try:
            raw = self.arena.read_mapped(copy=False)
            values = []
            for ref, shape, o in zip(refs, shapes, outs):
                offset, nbytes = self.region(ref)
                values.append(from_device(raw[offset:offset + nbytes], shape, o))
            return values
        finally:
            self.arena.unmap()

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
            if self.mapped:
                return self._run_mapped(inputs, out)
            self._submit_run(inputs, self._readback)
            if self._tracer is not None:
                self._tracer.end_run()
            return self._read_outputs(self._readback, out)

    def submit(self, inputs: Mapping[str, np.ndarray]) -> Pending:
        """The run submitted to the queue with its outputs copied into a readback buffer
        of its own (kept in a pool), mapped when waited for. ``queue.write_buffer`` takes
        the inputs at the call, and the queue runs in order, so a later run or submit
        writes the arena only after this one's outputs were copied out. Runs wait where
        the executable does not ``queues`` (see :func:`queues`) and when traced (each step
        is timed)."""
        if not self.queues or self._tracer is not None:
            return super().submit(inputs)
        with self._lock:
            buf = self._spare.pop() if self._spare else self.gpu.readback_buffer(self._readback.size)
            self._submit_run(inputs, buf)
            mapping = buf.map_async("READ")

        def finish() -> list[np.ndarray]:
            mapping.sync_wait()
            results = self._read_outputs(buf, None, mapped=True)
            with self._lock:
                self._spare.append(buf)
            return results
        return Pending(lambda: _settled(mapping), finish)

    def _submit_run(self, inputs: Mapping[str, np.ndarray], readback) -> None:
        """Write the inputs, encode every step and the output copies into ``readback``,
        and submit (a non-mapped arena)."""
        for name, ref in self._inputs.items():
            self.write(ref, to_device(inputs[name], self.graph.shape_of(ref).dtype))
        ctx = Encoder(self.gpu)
        self.encode(ctx)
        for ref, at in zip(self.graph.outputs, self._readback_at):
            offset, nbytes = self.region(ref)
            ctx.copy(self.arena, offset, readback, at, nbytes)
        ctx.flush()
        self.last_submits = ctx.submits

    def _run_mapped(self, inputs, out):
        """A run on a mapped arena: inputs written in place, outputs read in place."""
        self.write_values(list(self._inputs.values()), [inputs[name] for name in self._inputs])
        ctx = Encoder(self.gpu)
        self.encode(ctx)
        results = self.read_values(ctx, list(self.graph.outputs), None if out is None else list(out))
        self.last_submits = ctx.submits
        if self._tracer is not None:
            self._tracer.end_run()
        return results

    def _read_outputs(self, buf, out, mapped: bool = False):
        """The outputs from readback buffer ``buf`` (mapped here unless ``mapped``), unmapped after."""
        if not mapped:
            buf.map_sync(self.gpu.wgpu.MapMode.READ)
        try:
            raw = buf.read_mapped(copy=False)
            shapes = self.graph.output_shapes
            return [from_device(raw[at:at + self.region(ref)[1]], shape, None if out is None else out[i])
                    for i, (ref, at, shape) in enumerate(zip(self.graph.outputs, self._readback_at, shapes))]
        finally:
            buf.unmap()


def queues(info, mapped: bool) -> bool:
    """Whether submits on this adapter queue (``async_pipeline``): not with a mapped arena
    (unified memory: runs write and read the idle arena through a mapping), nor on a
    software adapter (lavapipe, llvmpipe, ...: the readback's ``map_async`` waited for the
    queue, so each submit took one run's time there, and a run was done on return about
    once in three)."""
    return not mapped and not is_software(info)


def _settled(promise) -> bool:
    """Whether a wgpu promise has its outcome (wgpu-py's poll thread sets it; the state is
    not public: a promise without one counts as settled, so that polling ends and
    ``sync_wait`` does the waiting)."""
    return getattr(promise, "_state", "settled") != "pending"


def _constant_value(node) -> np.ndarray:
    """A constant's array, or a folded source op's value (its reference kernel's result)."""
    if node.kind == "constant":
        return node.attrs["value"]
    return run_node(node, [], RefContext())[0]

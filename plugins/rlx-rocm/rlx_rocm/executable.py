"""RocmExecutable: one graph compiled for one OpenCL device.

Compiling schedules the graph into steps (fused elementwise groups, one kernel step per
other node, rng and control-flow steps), generates their OpenCL C, builds one program
for the graph (cached on disk), places every value, scratch region, param and constant
in one arena (``rlx_core.runtime.arena.place``: values whose lifetimes do not overlap
share bytes), uploads constants and binds every kernel to the arena and its slots' byte
offsets once (no sub-buffers).

A run enqueues the input copies, every kernel and the output copies on the device's
in-order queue, then waits once (``finish``): one flush per run. Outputs land straight
in the caller's ``out=`` arrays (the device layout of every dtype is numpy's). Control
flow adds a blocking read of each condition it tests.
"""
from __future__ import annotations

import os
import threading
from typing import Mapping, Sequence

import numpy as np

from rlx_core.errors import DeviceError, RlxError
from rlx_core.ir import Graph, Ref
from rlx_core.passes.fusion import value_lifetimes
from rlx_core.reference import RefContext, run_node
from rlx_core.runtime import CompileOptions, ExecutableGraph, Pending, Tracer
from rlx_core.runtime.arena import place

from .codegen import GENERATORS, KernelContext, fused_kernel, preamble
from .codegen.base import Scratch
from .control import CONTROL_KINDS
from .schedule import ALIAS_KINDS, FOLDED_KINDS, schedule
from .steps import RNG_KINDS, KernelStep, RngStep

__all__ = ["RocmExecutable", "KNOWN_OPTIONS"]

KNOWN_OPTIONS = frozenset({"fuse", "gemm_tile", "conv"})
FOREVER = 1 << 40
GUARD_ENV = "RLX_ROCM_GUARD"  # set (not "0"): bytes outside every slot are checked after each run
GUARD_BYTE = 0xA5


def check_options(options: Mapping) -> None:
    """Backend options: ``fuse`` (bool, default True: fuse elementwise chains), ``gemm_tile``
    ("TMxTNxTK/WMxWN[/db]", see ``rlx_rocm.codegen.linalg``), ``conv`` ("auto" | "direct" |
    "im2col": force one convolution route)."""
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise RlxError(f"unknown rocm backend option(s) {sorted(unknown)}; known: {', '.join(sorted(KNOWN_OPTIONS))}")
    if options.get("conv", "auto") not in ("auto", "direct", "im2col"):
        raise RlxError(f"rocm backend option conv must be 'auto', 'direct' or 'im2col', got {options['conv']!r}")
    if "gemm_tile" in options:
        from .codegen.linalg import parse_tile
        parse_tile(options["gemm_tile"])


class RocmExecutable(ExecutableGraph):
    capabilities = frozenset({"async_pipeline", "out_buffers", "control_flow", "fused_elementwise"})

    def __init__(self, graph: Graph, options: CompileOptions, dev):
        check_options(options.backend)
        self.graph = graph
        self.options = options
        self.dev = dev
        self.cl = dev.cl
        self.queue = dev.queue
        self.rng = options.rng
        self._lock = threading.Lock()
        self._children: dict[int, RocmExecutable] = {}
        self._aliases = {Ref(n.id): n.inputs[0] for n in graph.nodes if n.kind in ALIAS_KINDS}
        self._constants = {Ref(n.id): _constant_value(n) for n in graph.nodes
                           if n.kind == "constant" or n.kind in FOLDED_KINDS}
        self.steps = [self._step(i, s) for i, s in enumerate(schedule(graph, bool(options.backend.get("fuse", True))))]
        self._plan()
        self._build()
        self._params = {n.attrs["name"]: Ref(n.id) for n in graph.param_nodes}
        self._inputs = [(n.attrs["name"], self.region(Ref(n.id))) for n in graph.input_nodes]
        self._outputs = [(self.region(r), s) for r, s in zip(graph.outputs, graph.output_shapes)]
        self._tracer = Tracer(graph.name, "rocm") if options.tracing else None

    # --- compiling ----------------------------------------------------------------------------
    def _step(self, index: int, step):
        node = step.root
        if node.kind in CONTROL_KINDS:
            return CONTROL_KINDS[node.kind](index, node, self)
        k = KernelContext(self.graph, node, self.dev, dict(self.options.backend))
        if step.fused:
            fused_kernel(k, list(step.nodes))
            return KernelStep(index, step.nodes, k)
        gen = GENERATORS.get(node.kind)
        if gen is None:
            raise DeviceError(f"{node.label}: the rocm backend has no kernel for {node.kind}")
        gen(k)
        return RngStep(index, node, k) if node.kind in RNG_KINDS else KernelStep(index, step.nodes, k)

    def _plan(self) -> None:
        """Place every value, scratch region, param and constant in one arena."""
        g = self.graph
        first, last = value_lifetimes(g, self.steps, self.root, len(self.steps))
        persistent = list(self._constants) + [Ref(n.id) for n in g.param_nodes]
        buffers = {ref: (start, last.get(ref, start), g.shape_of(ref).nbytes)
                   for ref, start in first.items() if ref not in self._constants}
        buffers.update({ref: (-1, FOREVER, g.shape_of(ref).nbytes) for ref in persistent})
        for step in self.steps:
            root = step.nodes[-1].id if hasattr(step, "nodes") else step.node.id
            for i, n in enumerate(step.scratch_sizes):
                buffers[Scratch(root, i)] = (step.index, step.index, n)
        placements, size = place(buffers, self.dev.alignment)
        self._regions = {key: (p.offset, p.nbytes) for key, p in placements.items()}
        self.arena_bytes = size
        self.arena = self.dev.buffer(size, f"the arena of graph '{g.name}'")
        self._gaps = _gaps(self._regions, max(size, 4)) if os.environ.get(GUARD_ENV, "") not in ("", "0") else None
        if self._gaps is not None:  # guard mode: bytes no slot owns hold GUARD_BYTE, checked after each run
            self.cl.enqueue_fill_buffer(self.queue, self.arena, np.uint8(GUARD_BYTE), 0, max(size, 4)).wait()
        for ref, value in self._constants.items():
            self.write(ref, value)

    def _build(self) -> None:
        kernels: dict[str, str] = {}
        helpers: dict[str, None] = {}
        for step in self.steps:
            for d in getattr(step, "dispatches", ()):
                kernels.setdefault(d.name, d.source)
                for h in d.helpers:
                    helpers.setdefault(h, None)
        self._program = None
        if kernels:
            body = "\n".join([*helpers, *kernels.values()])
            source = preamble(self.dev.fp64, body) + body
            self._program = self.dev.program(source)
        for step in self.steps:
            step.bind(self)

    def kernel(self, name: str):
        return self.cl.Kernel(self._program, name)

    def child(self, graph: Graph) -> "RocmExecutable":
        """The executable of a control-flow body, compiled once per subgraph."""
        if id(graph) not in self._children:
            self._children[id(graph)] = RocmExecutable(graph, self.options.with_(trace=False), self.dev)
        return self._children[id(graph)]

    # --- regions ------------------------------------------------------------------------------
    def root(self, ref: Ref) -> Ref:
        while ref in self._aliases:
            ref = self._aliases[ref]
        return ref

    def region(self, slot) -> tuple[int, int]:
        """``(offset, nbytes)`` of a value or scratch region in the arena."""
        key = self.root(slot) if isinstance(slot, Ref) else slot
        return self._regions[key]

    def argument(self, slot) -> tuple:
        """``(arena buffer, byte offset)`` of an arena slot: what a kernel is bound to (no
        sub-buffers; every offset is a multiple of the device's base address alignment)."""
        offset, _ = self.region(slot)
        if offset % self.dev.alignment:
            raise DeviceError(f"graph '{self.graph.name}': arena slot {slot} at byte {offset}, not a multiple of "
                              f"the device's alignment ({self.dev.alignment} bytes)")
        return self.arena, offset

    def write(self, slot, data: np.ndarray) -> None:
        offset, nbytes = self.region(slot)
        if nbytes:
            self.cl.enqueue_copy(self.queue, self.arena, np.ascontiguousarray(data), dst_offset=offset,
                                 is_blocking=True)

    def write_async(self, slot, data: np.ndarray) -> None:
        """Enqueue a host-to-device copy; ``data`` must stay alive until the run ends."""
        offset, nbytes = self.region(slot)
        if nbytes:
            self.cl.enqueue_copy(self.queue, self.arena, data, dst_offset=offset, is_blocking=False)

    def copy(self, src_exe: "RocmExecutable", src, dst, src_extra: int = 0, dst_extra: int = 0) -> None:
        """Enqueue a device copy of value ``src`` of ``src_exe`` (from byte ``src_extra`` of
        it) into value ``dst`` of this arena (at byte ``dst_extra``)."""
        s_off, s_bytes = src_exe.region(src)
        d_off, d_bytes = self.region(dst)
        nbytes = min(s_bytes - src_extra, d_bytes - dst_extra)
        if nbytes > 0 and (src_exe is not self or s_off + src_extra != d_off + dst_extra):
            self.cl.enqueue_copy(self.queue, self.arena, src_exe.arena, byte_count=nbytes,
                                 src_offset=s_off + src_extra, dst_offset=d_off + dst_extra)

    def read_now(self, slot, shape) -> np.ndarray:
        """Read a value back (blocking: ends the queue's batch)."""
        offset, nbytes = self.region(slot)
        out = np.empty(shape.dims, shape.dtype.np)
        if nbytes:
            self.cl.enqueue_copy(self.queue, out, self.arena, src_offset=offset, is_blocking=True)
        return out

    def check_guard(self) -> None:
        """Guard mode (``RLX_ROCM_GUARD=1``): raise DeviceError when any byte of this arena
        (or of a control-flow body's) that belongs to no value or scratch region lost its
        guard byte -- a kernel or copy wrote outside the slot it was given (PoCL lets a
        write past a buffer's end pass; a GPU driver may fault, or corrupt a neighbour)."""
        data = np.empty(max(self.arena_bytes, 4), np.uint8)
        self.cl.enqueue_copy(self.queue, data, self.arena, is_blocking=True)
        for lo, hi in self._gaps:
            bad = np.flatnonzero(data[lo:hi] != GUARD_BYTE)
            if bad.size:
                owner = max(((off, key) for key, (off, _) in self._regions.items() if off <= lo),
                            default=(0, None), key=lambda t: t[0])[1]
                raise DeviceError(f"graph '{self.graph.name}': {bad.size} byte(s) written outside every slot, first "
                                  f"at arena byte {lo + int(bad[0])} (free bytes [{lo}, {hi}) after slot {owner}, "
                                  f"{self._regions.get(owner)})")
        for child in self._children.values():
            child.check_guard()

    # --- running ------------------------------------------------------------------------------
    def enqueue(self) -> None:
        """Enqueue this graph's steps (its inputs must already be in place)."""
        for step in self.steps:
            if self._tracer is None:
                step.enqueue(self)
                continue
            with self._tracer.span(step.label):
                step.enqueue(self)
                self.queue.finish()

    def set_param(self, name: str, value: np.ndarray) -> None:
        with self._lock:
            self.write(self._params[name], value)

    def set_rng(self, rng) -> None:
        self.rng = rng

    def run(self, inputs: Mapping[str, np.ndarray], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        with self._lock:
            events, results = self._enqueue_run(inputs, out, copy_inputs=False)
            self.queue.finish()
            del events
            if self._gaps is not None:
                self.check_guard()
            if self._tracer is not None:
                self._tracer.end_run()
            return results

    def submit(self, inputs: Mapping[str, np.ndarray]) -> Pending:
        """The run enqueued (inputs copied first: the device reads them later) and flushed,
        not waited for. The queue is in order, so a later run or submit starts writing
        the arena only after this one's outputs were copied out into arrays of its own.
        Guard mode and traced runs wait (they check or time each run)."""
        if self._gaps is not None or self._tracer is not None:
            return super().submit(inputs)
        cl = self.cl
        with self._lock:
            events, results = self._enqueue_run(inputs, None, copy_inputs=True)
            marker = cl.enqueue_marker(self.queue)
            self.queue.flush()

        def finish() -> list[np.ndarray]:
            marker.wait()
            events.clear()
            return results
        return Pending(lambda: marker.command_execution_status <= cl.command_execution_status.COMPLETE, finish)

    def _enqueue_run(self, inputs, out, copy_inputs: bool) -> tuple[list, list[np.ndarray]]:
        """Enqueue a run: input copies, every step, output copies into ``out`` or new
        arrays. The events of host copies must be kept until the run is waited for:
        pyopencl's event of a non-blocking host copy holds the host array and waits for
        the copy when dropped."""
        cl, q = self.cl, self.queue
        events = []
        for name, (offset, nbytes) in self._inputs:
            if nbytes:
                data = np.array(inputs[name], order="C") if copy_inputs else np.ascontiguousarray(inputs[name])
                events.append(cl.enqueue_copy(q, self.arena, data, dst_offset=offset, is_blocking=False))
        self.enqueue()
        results = list(out) if out is not None else [np.empty(s.dims, s.dtype.np) for _, s in self._outputs]
        for ((offset, nbytes), _), dest in zip(self._outputs, results):
            if nbytes:
                events.append(cl.enqueue_copy(q, dest, self.arena, src_offset=offset, is_blocking=False))
        return events, results


def _gaps(regions: Mapping, size: int) -> list[tuple[int, int]]:
    """The byte ranges of ``[0, size)`` that no ``(offset, nbytes)`` region covers."""
    out, at = [], 0
    for off, n in sorted(regions.values()):
        if off > at:
            out.append((at, off))
        at = max(at, off + n)
    if at < size:
        out.append((at, size))
    return out


def _constant_value(node) -> np.ndarray:
    """A constant's array, or a folded source op's value (its reference kernel's result)."""
    dt = node.outputs[0].dtype.np
    if node.kind == "constant":
        return np.ascontiguousarray(np.asarray(node.attrs["value"]).astype(dt, copy=False))
    return np.ascontiguousarray(np.asarray(run_node(node, [], RefContext())[0]).astype(dt, copy=False))

"""CudaExecutable: a lowered graph bound to one device arena.

Compile time: lower the graph, plan the arena, allocate it once, upload constants,
allocate params (uploaded once by ``set_param``), compile every kernel and bind every
action to fixed device addresses. A run then stages inputs into the arena (one copy for
all host inputs, see ``rlx_cuda.staging``), replays the bound actions (or one captured
CUDA graph of them) and reads the outputs. When a
fused attention kernel fails to build under ``attention="auto"``, the graph is lowered
again with the cuBLAS attention path (``attention_fallback`` says why). Runs use
CuPy's current stream, so device outputs are ordered with the caller's CuPy work.

Backend options (``CompileOptions.backend``): ``device`` (index, default 0),
``outputs`` ("numpy" | "cupy" | "torch"), ``graph_capture`` (default True), ``fuse``
(default True), ``fold_views`` (default True: movement ops read in place, see
``rlx_cuda.views``), ``attention`` ("auto" | "flash" | "decode" | "cublas": force one
attention kernel where it applies, see ``lower.attention_kernel``),
``attention_splits`` (force this many key splits per attention block),
``attention_scores_bytes`` (scores memory per launch of the cuBLAS attention path),
``control_flow`` ("auto" | "host": "host" keeps if/while/scan driven from the host
instead of CUDA graph conditional nodes, see ``rlx_cuda.control``; the executable's
``control_flow_mode`` says which runs).
The environment variable ``RLX_CUDA_BACKEND`` (a JSON object) supplies defaults for
these options, e.g. ``'{"attention": "cublas"}'`` to route a whole test suite or
benchmark around a suspect kernel; options given in ``CompileOptions`` win.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Mapping, Sequence

import numpy as np
from rlx_core.errors import InputError, RlxError
from rlx_core.ir import DType, Graph, Ref
from rlx_core.reference import evaluate
from rlx_core.rng import RngOptions, combine_seed
from rlx_core.runtime import CompileOptions, ExecutableGraph, Pending, PrecisionPolicy, Tracer

from . import graphs
from .control import CONTROL_KINDS, ControlFlow, control_flow, emit_items, executable_items
from .dtypes import storage_np
from .lower import ATTENTION_KERNELS, LowerContext, RngSeed, lower_graph
from .plan import plan_memory
from .runtime import Runtime
from .staging import Staging, torch_stream
from .steps import Buf, Copy, Gemm, Host, Launch, Memset

__all__ = ["CudaExecutable", "OUTPUT_MODES"]

log = logging.getLogger("rlx.cuda")
OUTPUT_MODES = ("numpy", "cupy", "torch")
CONTROL_FLOW_MODES = ("auto", "host")
_SUBMIT_DEPTH = 4  # submitted runs in flight per executable (each holds a pinned staging slot)
_KNOWN_OPTIONS = {"device", "outputs", "graph_capture", "fuse", "fold_views", "attention", "attention_splits",
                  "attention_scores_bytes", "control_flow"}


def backend_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` over the defaults of ``RLX_CUDA_BACKEND``, validated."""
    text = os.environ.get("RLX_CUDA_BACKEND", "").strip()
    try:
        defaults = json.loads(text) if text else {}
    except json.JSONDecodeError as e:
        raise RlxError(f"RLX_CUDA_BACKEND must be a JSON object of cuda backend options, got {text!r}: {e}") from None
    if not isinstance(defaults, dict):
        raise RlxError(f"RLX_CUDA_BACKEND must be a JSON object of cuda backend options, got {text!r}")
    options = {**defaults, **given}
    check_backend_options(options)
    return options


def check_backend_options(options: Mapping[str, Any]) -> None:
    unknown = set(options) - _KNOWN_OPTIONS
    if unknown:
        raise RlxError(f"unknown cuda backend option(s) {sorted(unknown)}; known: {sorted(_KNOWN_OPTIONS)}")
    if options.get("outputs", "numpy") not in OUTPUT_MODES:
        raise RlxError(f"cuda backend option outputs must be one of {', '.join(OUTPUT_MODES)}, "
                       f"got {options['outputs']!r}")
    if options.get("attention", "auto") not in ATTENTION_KERNELS:
        raise RlxError(f"cuda backend option attention must be one of {', '.join(ATTENTION_KERNELS)}, "
                       f"got {options['attention']!r}")
    if options.get("control_flow", "auto") not in CONTROL_FLOW_MODES:
        raise RlxError(f"cuda backend option control_flow must be one of {', '.join(CONTROL_FLOW_MODES)}, "
                       f"got {options['control_flow']!r}")
    splits = options.get("attention_splits")
    if splits is not None and not (isinstance(splits, int) and not isinstance(splits, bool) and splits >= 1):
        raise RlxError(f"cuda backend option attention_splits must be an int >= 1, got {splits!r}")


def lower_context(graph: Graph, options: CompileOptions, backend: Mapping[str, Any],
                  props: Mapping[str, Any]) -> LowerContext:
    """The lowering choices ``options`` and ``backend`` options make for ``graph`` on a
    device of properties ``props`` (CuPy's ``getDeviceProperties``: SM count and
    compute capability)."""
    ctx = LowerContext(graph, tf32=options.precision not in (PrecisionPolicy.DECLARED, PrecisionPolicy.F32),
                       fuse=bool(backend.get("fuse", True)), rng_mode=options.rng.mode,
                       attention=backend.get("attention", "auto"), attention_splits=backend.get("attention_splits"),
                       fold_views=bool(backend.get("fold_views", True)),
                       sm_count=int(props.get("multiProcessorCount", 132)),
                       arch=10 * int(props.get("major", 9)) + int(props.get("minor", 0)))
    if "attention_scores_bytes" in backend:
        ctx.attention_scores_bytes = int(backend["attention_scores_bytes"])
    return ctx


class CudaExecutable(ExecutableGraph):
    def __init__(self, graph: Graph, options: CompileOptions, runtime: Runtime | None = None):
        self.backend = backend_options(options.backend)
        self.graph = graph
        self.options = options
        self.rng = options.rng
        self.rt = runtime or Runtime.get(int(self.backend.get("device", 0)))
        self.cp = self.rt.cp
        self.output_mode = self.backend.get("outputs", "numpy")
        self._lock = threading.Lock()
        self._subexec: dict[int, CudaExecutable] = {}
        self._scalars: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
        self.attention_fallback: str | None = None
        ctx = lower_context(graph, options, self.backend, self.rt.props)
        try:
            self._build(ctx)
        except Exception as e:  # a fused attention kernel that does not build must not cost the graph
            if ctx.attention != "auto" or not _fused_attention(getattr(self, "steps", ())):
                raise
            self.attention_fallback = f"{type(e).__name__}: {e}"
            log.warning("cuda: fused attention kernels of '%s' failed to build, using the cuBLAS path: %s",
                        graph.name, self.attention_fallback)
            ctx.attention = "cublas"
            self._build(ctx)
        self._inputs = {n.attrs["name"]: self.arrays[Ref(n.id)] for n in graph.input_nodes}
        self._params = {n.attrs["name"]: self.arrays[Ref(n.id)] for n in graph.param_nodes}
        self._outputs = [self.arrays[r] for r in graph.outputs]
        self._out_dtypes = graph.output_shapes
        self.capture_enabled = bool(self.backend.get("graph_capture", True)) and \
            all(cap or (i in self._control and self._control[i].reason is None)
                for i, (_, cap, _) in enumerate(self._bound))
        self._graph = None
        self._staging: Staging | None = None  # made by the first run (control-flow bodies never need it)
        self._ring: list[Staging] = []  # submit's staging slots, made by the first submit
        self._next_slot = 0
        self._owners: dict[Staging, Pending] = {}  # slot -> the queued run whose outputs it holds
        self._queued = None  # (event, stream) of the last submitted run, until it is seen done
        self._runs = 0
        self.capture_error: str | None = None
        self._tracer = Tracer(graph.name, "cuda") if options.tracing else None

    def _build(self, ctx: LowerContext) -> None:
        """Lower, plan the arena, allocate and bind everything (kernels compile here)."""
        self.steps = lower_graph(ctx)
        self.plan = plan_memory(self.graph, self.steps, ctx.views.aliases)
        with self.rt.device:
            self.arena = self.rt.alloc(self.plan.size)
            self.arrays = self._bind_arrays()
            self._control: dict[int, ControlFlow] = {}  # step index -> its control-flow node
            self._bound = [(step.label, step.capturable, [self._bind(i, a) for a in step.actions])
                           for i, step in enumerate(self.steps)]

    @property
    def capabilities(self) -> frozenset[str]:
        caps = {"gpu_handles", "typed_io", "async_pipeline", "out_buffers", "dlpack", "control_flow",
                "fused_elementwise"}
        if self.capture_enabled:
            caps.add("graph_capture")
        return frozenset(caps)

    # --- binding ---------------------------------------------------------------------
    def _bind_arrays(self) -> dict[Ref, Any]:
        """One CuPy array per value: arena views, own buffers for params/constants, aliases."""
        arrays: dict[Ref, Any] = {}
        for node in self.graph.nodes:
            for i, shape in enumerate(node.outputs):
                ref = Ref(node.id, i)
                dt = storage_np(shape.dtype)
                if ref in self.plan.aliases:
                    arrays[ref] = arrays[self.plan.aliases[ref]].reshape(shape.dims)
                elif ref in self.plan.placements:
                    arrays[ref] = self.rt.view(self.arena, self.plan.placements[ref].offset, shape.dims, dt)
                elif node.kind == "param":
                    arrays[ref] = self.cp.zeros(shape.dims, dt)
                elif node.kind in ("constant", "arange"):
                    value = evaluate(_single_node_graph(node), {}, {})[0]
                    arrays[ref] = self.cp.asarray(np.asarray(value, order="C").view(dt))
        return arrays

    def _address(self, step: int, buf: Buf) -> int:
        if buf.ref is None:
            return self.arena.ptr + self.plan.scratch[step].offset + buf.offset
        return self.arrays[buf.ref].data.ptr + buf.offset

    def _bind(self, step: int, action):
        """A zero-argument callable performing ``action`` on the current stream."""
        rt, cp = self.rt, self.cp
        if isinstance(action, Launch):
            fn = rt.kernel(action.source)
            fixed = [np.uint64(self._address(step, a)) if isinstance(a, Buf) else a for a in action.args]
            seeds = [(i, a.node) for i, a in enumerate(action.args) if isinstance(a, RngSeed)]
            grid, block = (action.grid,), (action.block,)
            if not seeds:
                args = tuple(fixed)
                return lambda: fn(grid, block, args)

            def launch_rng():
                args = list(fixed)
                for i, node in seeds:
                    base = node.attrs["seed"] if node.attrs["seed"] is not None else self.rng.seed
                    args[i] = np.uint64(combine_seed(base, node.attrs["key"]))
                fn(grid, block, tuple(args))
            return launch_rng
        if isinstance(action, Gemm):
            alpha, beta = np.ones(1, action.scalar), np.zeros(1, action.scalar)
            self._scalars[id(action)] = (alpha, beta)  # keep the host scalars alive
            a, b, c = (self._address(step, x) for x in (action.a, action.b, action.c))
            return lambda: rt.gemm(action, a, b, c, alpha, beta)
        if isinstance(action, Copy):
            dst, src = self._address(step, action.dst), self._address(step, action.src)
            return lambda: rt.copy(dst, src, action.nbytes, cp.cuda.get_current_stream())
        if isinstance(action, Memset):
            dst = self._address(step, action.dst)
            return lambda: rt.memset(dst, action.value, action.nbytes, cp.cuda.get_current_stream())
        if isinstance(action, Host) and action.node.kind in CONTROL_KINDS:
            self._control[step] = control_flow(self, action.node)
            return self._control[step]
        if isinstance(action, Host):
            from .tail import host_step
            node = action.node
            ins = [self.arrays[r] for r in node.inputs]
            outs = [self.arrays[Ref(node.id, i)] for i in range(len(node.outputs))]
            return lambda: host_step(self, node, ins, outs)
        raise RlxError(f"cuda: no binding for action {type(action).__name__}")

    # --- ExecutableGraph -----------------------------------------------------------------
    def set_param(self, name: str, value) -> None:
        with self._lock, self.rt.device:
            self._write(self._params[name], value)

    def set_rng(self, rng: RngOptions) -> None:
        if rng != self.rng:
            self._graph = None  # captured launches hold the old seeds
        self.rng = rng

    def run(self, inputs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        with self._lock, self.rt.device:
            if self._staging is None:
                self._staging = self._new_staging()
            if self._queued is not None:
                self._after_queued()
            self._staging.write_inputs(inputs)
            self._execute()
            return self._read_outputs(out)

    def submit(self, inputs: Mapping[str, Any]) -> Pending:
        """The run queued on CuPy's current stream, not waited for. Each queued run has a
        staging slot of its own (pinned input mirror and output buffer, see
        ``rlx_cuda.staging``): host inputs are copied into its mirror here (captured), and
        its outputs are copied out of the arena into its buffer right after its kernels,
        in stream order, so the next run cannot overwrite them. A run queued on another
        stream waits (on the device) for the previous one. With ``_SUBMIT_DEPTH`` runs in
        flight, the oldest is settled (waited for, outputs copied to fresh arrays) to free
        its slot. Torch/CuPy outputs are fresh device copies, ordered on the stream."""
        if self._tracer is not None:  # a traced run synchronizes each step: nothing to queue
            return super().submit(inputs)
        cp = self.cp
        with self._lock, self.rt.device:
            if self._staging is None:
                self._staging = self._new_staging()
            if self._queued is not None:
                self._after_queued()
            slot = self._free_slot()
            slot.write_inputs(inputs)
            self._execute()
            stream = cp.cuda.get_current_stream()
            if self.output_mode == "numpy":
                slot.send_outputs()
                done = slot.sent
                dtypes = [shape.dtype.np for shape in self._out_dtypes]
                pending = Pending(lambda: done.done, lambda: slot.take_outputs(dtypes))
            else:
                results = self._read_outputs(None)
                done = cp.cuda.Event(block=False, disable_timing=True)
                done.record(stream)
                pending = Pending(lambda: done.done, lambda: _synchronized(done, results))
            self._owners[slot] = pending
            self._queued = (done, stream)
            return pending

    def _new_staging(self) -> Staging:
        return Staging(self.rt, self.arena.ptr, self.plan.input_bytes, self._inputs, self._outputs, self._write)

    def _free_slot(self) -> Staging:
        """The next staging slot of the submit ring, its previous run settled first."""
        if not self._ring:
            self._ring = [self._new_staging() for _ in range(_SUBMIT_DEPTH)]
        slot = self._ring[self._next_slot]
        self._next_slot = (self._next_slot + 1) % len(self._ring)
        owner = self._owners.pop(slot, None)
        if owner is not None:
            try:
                owner.wait()  # its outputs move to fresh arrays; an error stays for its own wait()
            except Exception:
                pass
        return slot

    def _after_queued(self) -> None:
        """Order this run after the last queued one when it runs on another stream (they
        share the arena); nothing to do on the same stream or once that run is done."""
        done, stream = self._queued
        current = self.cp.cuda.get_current_stream()
        if done.done:
            self._queued = None
        elif current.ptr != stream.ptr:
            current.wait_event(done)

    def run_device(self, args: Sequence[Any]) -> list[Any]:
        """Run on device arrays bound to the inputs by position; returns arena views
        (valid until the next run)."""
        for view, value in zip(self._inputs.values(), args):
            self._write(view, value)
        self._execute()
        return list(self._outputs)

    # --- internals --------------------------------------------------------------------------
    def _execute(self) -> None:
        self._runs += 1
        if self._graph is None and self.capture_enabled and self._runs > 1 and self._tracer is None:
            self._capture()
        if self._graph is not None:
            self._graph.launch(stream=self.cp.cuda.get_current_stream())
            return
        if self._tracer is None:
            for _, _, actions in self._bound:
                for act in actions:
                    act()
            return
        stream = self.cp.cuda.get_current_stream()
        for i, (label, _, actions) in enumerate(self._bound):
            ctl = self._control.get(i)
            with self._tracer.span(f"{label} [control flow: {ctl.mode}]" if ctl else label,
                                   "control_flow" if ctl else "op"):
                for act in actions:
                    act()
                stream.synchronize()
        self._tracer.end_run()

    def _capture(self) -> None:
        """Record every action into one CUDA graph (after a first eager run, so kernels
        are compiled and cuBLAS is initialized), control flow as conditional nodes
        (``rlx_cuda.control``). A failure keeps eager execution, and control flow on the host."""
        try:
            if self._control:
                self._graph = graphs.build(self.cp, lambda chain: emit_items(chain, executable_items(self)))
            else:
                self._graph = graphs.capture(self.cp, [act for _, _, actions in self._bound for act in actions])
        except Exception as e:  # capture is an optimization: never fail the run for it
            self.capture_enabled = False
            self.capture_error = f"{type(e).__name__}: {e}"
            for ctl in self._control.values():
                ctl.fail(self.capture_error)
            log.warning("cuda: CUDA graph capture of '%s' failed, running eagerly: %s", self.graph.name, e)

    @property
    def control_flow_mode(self) -> str | None:
        """How control flow runs: "device" (CUDA graph conditional nodes), "host" (loops
        driven from the host), "mixed", or None without control flow. Decided at compile
        time; a conditional graph that fails to build turns its nodes to "host"."""
        modes = {ctl.mode for ctl in self._control.values()}
        return None if not modes else modes.pop() if len(modes) == 1 else "mixed"

    @property
    def control_flow_reasons(self) -> dict[str, str]:
        """Why each host-mode control-flow node is not on the device (label -> reason)."""
        return {ctl.label: ctl.reason for ctl in self._control.values() if ctl.reason is not None}

    def _write(self, view, value) -> None:
        """Copy a host (numpy) or device (DLPack) array into ``view`` without a host round trip."""
        cp = self.cp
        if isinstance(value, np.ndarray):
            view.set(np.asarray(value, order="C").view(view.dtype))  # (0-d stays 0-d)
            return
        src = _from_dlpack(cp, value, view.dtype)
        if src.shape != view.shape:
            raise InputError(f"device array of dims {list(src.shape)} given where {list(view.shape)} is expected")
        if src.flags.c_contiguous:
            self.rt.copy(view.data.ptr, src.data.ptr, view.nbytes, cp.cuda.get_current_stream())
        else:
            cp.copyto(view, src)

    def _read_outputs(self, out: Sequence[np.ndarray] | None) -> list[Any]:
        if out is not None or self.output_mode == "numpy":
            return self._staging.read_numpy([shape.dtype.np for shape in self._out_dtypes], out)
        if self.output_mode == "torch":
            import torch
            if torch_stream(torch, self.rt.index) == self.cp.cuda.get_current_stream().ptr:
                return self._staging.read_torch([getattr(torch, shape.dtype.np.name) for shape in self._out_dtypes])
            copies = [src.copy() for src in self._outputs]  # another stream: DLPack orders the hand-over
            return [_torch_view(torch.from_dlpack(c), shape.dtype) for c, shape in zip(copies, self._out_dtypes)]
        return [_cupy_view(src.copy(), shape.dtype) for src, shape in zip(self._outputs, self._out_dtypes)]

    def subgraph(self, graph: Graph) -> "CudaExecutable":
        """The executable of a control-flow body (compiled once, same device)."""
        exe = self._subexec.get(id(graph))
        if exe is None:
            backend = {k: v for k, v in self.backend.items() if k != "outputs"}
            exe = CudaExecutable(graph, CompileOptions(rng=self.rng, backend=backend), self.rt)
            self._subexec[id(graph)] = exe
        return exe


def _synchronized(event, results: list[Any]) -> list[Any]:
    """``results`` once ``event`` (recorded after they were written) has completed."""
    event.synchronize()
    return results


def _fused_attention(steps) -> bool:
    """Whether some attention step runs a fused kernel (no cuBLAS GEMM in it)."""
    return any("attention" in step.label and step.actions and not any(isinstance(a, Gemm) for a in step.actions)
               for step in steps)


def _single_node_graph(node) -> Graph:
    g = Graph("constant")
    v = g.add_node(node.kind, (), dict(node.attrs))
    g.set_outputs([v])
    return g


def _from_dlpack(cp, value, storage):
    """A CuPy view of any DLPack device array (torch bfloat16 is viewed as int16 first,
    since CuPy 13 has no bfloat16)."""
    if isinstance(value, cp.ndarray):
        arr = value
    else:
        try:
            arr = cp.from_dlpack(value)
        except (TypeError, NotImplementedError, ValueError, BufferError):
            if type(value).__module__.startswith("torch"):
                import torch
                arr = cp.from_dlpack(value.view(torch.int16))
            else:
                raise
    return arr.view(storage) if arr.dtype != storage and arr.dtype.itemsize == storage.itemsize else arr


def _cupy_view(arr, dtype: DType):
    if dtype is DType.BF16:
        try:
            import ml_dtypes
            return arr.view(ml_dtypes.bfloat16)  # CuPy >= 14 with ml_dtypes
        except Exception:
            return arr  # the bfloat16 bits, as uint16
    return arr


def _torch_view(tensor, dtype: DType):
    if dtype is DType.BF16:
        import torch
        return tensor.view(torch.bfloat16)
    return tensor

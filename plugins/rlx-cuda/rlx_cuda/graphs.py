"""CUDA graphs with control flow on the device: conditional IF / WHILE nodes (CUDA 12.4+).

Why: a loop driven from the host pays a launch and a synchronization per iteration.
With conditional nodes the GPU evaluates a predicate itself (a one-thread kernel calls
``cudaGraphSetConditional``) and runs or repeats a body graph, so a whole run with
loops and branches is one graph launch.

Pieces:

* :class:`Driver`: the few CUDA driver API calls this needs, through ctypes into the
  ``libcuda`` CuPy already loaded (as ``runtime.Cublas`` does for cuBLAS). Driver
  symbols keep their ABI across releases (the runtime API's ``cudaGraphAddNode`` changed
  its signature in CUDA 13), so one binding serves every driver >= 12.4.
* :class:`ControlKernels`: the loop-control and batched-copy kernels, compiled by NVRTC.
  ``cudaGraphSetConditional`` is a device-runtime builtin that ptxas and the driver's
  loader resolve (no ``-rdc``, no ``cudadevrt``), so a forward declaration is all the
  source needs; it is compiled in only for the conditional variant, so the host-driven
  fallback never depends on it.
* :class:`Chain`: fills one graph in order -- runs of ordinary work are stream-captured
  straight into it (``cuStreamBeginCaptureToGraph`` after the previous nodes), conditional
  nodes are added between them, and their bodies are chains of their own.
* :func:`build`: a whole graph, instantiated, as a :class:`DeviceGraph` to launch.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, Callable, Sequence

import numpy as np
from rlx_core.errors import RlxError

from .runtime import NVRTC_OPTIONS, _loaded_library

__all__ = ["ConditionalGraphError", "Driver", "ControlKernels", "CopyTable", "Chain", "DeviceGraph", "build",
           "control_kernels", "conditional_kernels", "capture", "IF", "WHILE", "CONTROL_SOURCE"]

log = logging.getLogger("rlx.cuda")

IF, WHILE = 0, 1                   # CU_GRAPH_COND_TYPE_*
_NODE_TYPE_CONDITIONAL = 13        # CU_GRAPH_NODE_TYPE_CONDITIONAL
_CAPTURE_MODE_RELAXED = 2          # CU_STREAM_CAPTURE_MODE_RELAXED (what CuPy's own capture uses)
_MIN_DRIVER = 12040
# Of each group one symbol suffices (drivers keep old entry points, but take no chances).
_ALTERNATIVES = (("cuGraphAddNode", "cuGraphAddNode_v2"), ("cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2"))
_COPY_BLOCK = 256
_ENTRY_WORDS = 5                   # a copy-table entry: dst, src, nbytes, dst_step, src_step


class ConditionalGraphError(RlxError):
    """Conditional graph nodes are not available or a conditional graph failed to build."""


# --- the driver API -------------------------------------------------------------------------
class _CondParams(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64), ("type", ctypes.c_int), ("size", ctypes.c_uint),
                ("phGraph_out", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


class _NodeParams(ctypes.Structure):
    """``CUgraphNodeParams``: type, 3 reserved ints, a 232-byte union, one reserved long."""
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("conditional", _CondParams),
                ("union_rest", ctypes.c_char * (29 * 8 - ctypes.sizeof(_CondParams))),
                ("reserved2", ctypes.c_longlong)]


assert ctypes.sizeof(_NodeParams) == 256 and _NodeParams.conditional.offset == 16

_V, _P, _N, _U, _U64 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint, \
    ctypes.c_uint64
_SIGNATURES = {
    "cuCtxGetCurrent": [_P],
    "cuGraphCreate": [_P, _U],
    "cuGraphDestroy": [_V],
    "cuGraphAddEmptyNode": [_P, _V, _P, _N],
    "cuGraphAddNode": [_P, _V, _P, _N, ctypes.POINTER(_NodeParams)],          # the 12.2 ABI (no edge data)
    "cuGraphAddNode_v2": [_P, _V, _P, _V, _N, ctypes.POINTER(_NodeParams)],   # 12.3+: edge data (NULL here)
    "cuGraphConditionalHandleCreate": [ctypes.POINTER(_U64), _V, _V, _U, _U],
    "cuStreamBeginCaptureToGraph": [_V, _V, _P, _V, _N, ctypes.c_int],
    "cuStreamGetCaptureInfo_v2": [_V, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_U64), _P,
                                  ctypes.POINTER(_P), ctypes.POINTER(_N)],
    "cuStreamGetCaptureInfo_v3": [_V, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_U64), _P,
                                  ctypes.POINTER(_P), ctypes.POINTER(_V), ctypes.POINTER(_N)],
    "cuStreamEndCapture": [_V, _P],
    "cuGraphInstantiateWithFlags": [_P, _V, ctypes.c_ulonglong],
    "cuGraphLaunch": [_V, _V],
    "cuGraphExecDestroy": [_V],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class Driver:
    """ctypes bindings of the driver calls conditional graphs need (one per process)."""

    _instance: "Driver | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "Driver":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        path = _loaded_library("libcuda.so") or "libcuda.so.1"
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise ConditionalGraphError(f"cannot load the CUDA driver library {path}: {e}") from None
        present = {name for name in _SIGNATURES if hasattr(lib, name)}
        optional = {name for group in _ALTERNATIVES for name in group}
        missing = [name for name in _SIGNATURES if name not in present and name not in optional]
        missing += [" or ".join(group) for group in _ALTERNATIVES if not present & set(group)]
        if missing:
            raise ConditionalGraphError(f"the CUDA driver ({path}) lacks {', '.join(missing)}: conditional graph "
                                        f"nodes need a 12.4 or newer driver")
        for name in present:
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = _SIGNATURES[name], ctypes.c_int
        self.lib = lib
        self._add_node = "cuGraphAddNode" if "cuGraphAddNode" in present else "cuGraphAddNode_v2"
        self._capture_info = next(n for n in _ALTERNATIVES[1] if n in present)

    def _call(self, name: str, *args) -> None:
        status = getattr(self.lib, name)(*args)
        if status:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(text))
            raise ConditionalGraphError(f"{name} failed: {(text.value or b'?').decode()} ({status})")

    @staticmethod
    def _nodes(nodes: Sequence[int]):
        return (ctypes.c_void_p * max(len(nodes), 1))(*nodes), len(nodes)

    def context(self) -> int:
        ctx = ctypes.c_void_p()
        self._call("cuCtxGetCurrent", ctypes.byref(ctx))
        return ctx.value or 0

    def graph_create(self) -> int:
        g = ctypes.c_void_p()
        self._call("cuGraphCreate", ctypes.byref(g), 0)
        return g.value

    def graph_destroy(self, graph: int) -> None:
        self._call("cuGraphDestroy", graph)

    def add_empty(self, graph: int, deps: Sequence[int]) -> int:
        node = ctypes.c_void_p()
        self._call("cuGraphAddEmptyNode", ctypes.byref(node), graph, *self._nodes(deps))
        return node.value

    def handle_create(self, graph: int, ctx: int) -> int:
        handle = ctypes.c_uint64()
        self._call("cuGraphConditionalHandleCreate", ctypes.byref(handle), graph, ctx, 0, 0)
        return handle.value

    def add_conditional(self, graph: int, deps: Sequence[int], handle: int, kind: int, ctx: int) -> tuple[int, int]:
        """A conditional node of ``kind`` (IF / WHILE) after ``deps``: (node, its body graph)."""
        params = _NodeParams()
        params.type = _NODE_TYPE_CONDITIONAL
        params.conditional.handle, params.conditional.type, params.conditional.size = handle, kind, 1
        params.conditional.ctx = ctx
        node = ctypes.c_void_p()
        deps_arr, n = self._nodes(deps)
        if self._add_node == "cuGraphAddNode":
            self._call("cuGraphAddNode", ctypes.byref(node), graph, deps_arr, n, ctypes.byref(params))
        else:
            self._call("cuGraphAddNode_v2", ctypes.byref(node), graph, deps_arr, None, n, ctypes.byref(params))
        body = ctypes.cast(params.conditional.phGraph_out, ctypes.POINTER(ctypes.c_void_p))[0]
        return node.value, body

    def begin_capture(self, stream: int, graph: int, deps: Sequence[int]) -> None:
        arr, n = self._nodes(deps)
        self._call("cuStreamBeginCaptureToGraph", stream, graph, arr, None, n, _CAPTURE_MODE_RELAXED)

    def capture_frontier(self, stream: int) -> list[int]:
        """The nodes that work captured next on ``stream`` would depend on."""
        status, ident, graph = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
        deps, n = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_size_t()
        extra = (ctypes.byref(ctypes.c_void_p()),) if self._capture_info.endswith("_v3") else ()  # edge data
        self._call(self._capture_info, stream, ctypes.byref(status), ctypes.byref(ident),
                   ctypes.byref(graph), ctypes.byref(deps), *extra, ctypes.byref(n))
        return [deps[i] for i in range(n.value)]

    def end_capture(self, stream: int) -> None:
        g = ctypes.c_void_p()
        self._call("cuStreamEndCapture", stream, ctypes.byref(g))

    def instantiate(self, graph: int) -> int:
        exe = ctypes.c_void_p()
        self._call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, 0)
        return exe.value

    def launch(self, exe: int, stream: int) -> None:
        self._call("cuGraphLaunch", exe, stream)

    def exec_destroy(self, exe: int) -> None:
        self._call("cuGraphExecDestroy", exe)


# --- kernels ------------------------------------------------------------------------------------
CONTROL_SOURCE = r"""
struct __align__(16) rlx_cf_v16 { unsigned long long lo, hi; };

#ifdef RLX_CF_CONDITIONAL
extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);
#endif

/* Loop and branch control, one thread: counter += step (when given), then
   go = (cond is null or *cond != 0) and (limit < 0 or counter < limit); go is written to
   flag (when given) and, in the conditional variant, to handle `then_h` (set & 1) and its
   negation to handle `else_h` (set & 2). */
extern "C" __global__ void rlx_cf_control(unsigned long long then_h, unsigned long long else_h, unsigned int set,
                                          long long* counter, long long step, long long limit,
                                          const unsigned char* cond, unsigned char* flag) {
    long long i = 0;
    if (counter) { i = *counter + step; *counter = i; }
    unsigned int go = (cond == 0 || *cond != 0) && (limit < 0 || i < limit);
    if (flag) *flag = (unsigned char)go;
#ifdef RLX_CF_CONDITIONAL
    if (set & 1u) cudaGraphSetConditional(then_h, go);
    if (set & 2u) cudaGraphSetConditional(else_h, go ? 0u : 1u);
#endif
}

/* Many copies in one launch: entry blockIdx.y of `table` is (dst, src, nbytes, dst_step,
   src_step), skipped when src is 0; with a counter, slice t = *counter (length - 1 - *counter when reverse) is
   copied: dst + t * dst_step <- src + t * src_step. gridDim.x blocks share each copy. */
extern "C" __global__ void rlx_cf_copy(const unsigned long long* table, const long long* counter,
                                       long long length, int reverse) {
    const unsigned long long* e = table + 5 * (unsigned long long)blockIdx.y;
    if (e[1] == 0ull) return;  /* an entry without a source: nothing to copy this time */
    long long t = 0;
    if (counter) {
        t = reverse ? length - 1 - *counter : *counter;
        if (t < 0 || t >= length) return;
    }
    char* dst = (char*)(e[0] + (unsigned long long)t * e[3]);
    const char* src = (const char*)(e[1] + (unsigned long long)t * e[4]);
    unsigned long long n = e[2];
    unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long bits = (unsigned long long)dst | (unsigned long long)src | n;
    if ((bits & 15ull) == 0) {
        for (unsigned long long k = first; k < n / 16; k += stride)
            ((rlx_cf_v16*)dst)[k] = ((const rlx_cf_v16*)src)[k];
    } else if ((bits & 3ull) == 0) {
        for (unsigned long long k = first; k < n / 4; k += stride)
            ((unsigned int*)dst)[k] = ((const unsigned int*)src)[k];
    } else {
        for (unsigned long long k = first; k < n; k += stride) dst[k] = src[k];
    }
}
"""


class CopyTable:
    """Device-to-device copies done by one kernel launch; entries with a step are slices
    indexed by a device counter (scan inputs and outputs)."""

    def __init__(self, cp, entries: Sequence[tuple[int, int, int, int, int]]):
        self.entries = [e for e in entries if e[2] and (e[0] != e[1] or e[3] != e[4])]
        words = np.array(self.entries, dtype=np.uint64).reshape(-1, _ENTRY_WORDS)
        self.table = cp.asarray(words) if self.entries else None
        self.blocks = _copy_blocks(max((e[2] for e in self.entries), default=0))

    def __len__(self) -> int:
        return len(self.entries)


def _copy_blocks(nbytes: int) -> int:
    """Blocks per copy of ``rlx_cf_copy``: one per 16-byte word of every thread, at most 1024."""
    return max(1, min(1024, -(-nbytes // (_COPY_BLOCK * 16))))


class ControlKernels:
    """The compiled control kernels of one device; ``conditional``: the variant that sets
    conditional handles (needs a 12.4+ driver and toolchain)."""

    def __init__(self, rt, conditional: bool):
        options = NVRTC_OPTIONS + (("-DRLX_CF_CONDITIONAL",) if conditional else ())
        with rt.device:
            module = rt.cp.RawModule(code=CONTROL_SOURCE, options=options)
            self._control = module.get_function("rlx_cf_control")
            self._copy = module.get_function("rlx_cf_copy")
        self.conditional = conditional

    def control(self, *, then_h: int = 0, else_h: int = 0, set_mask: int = 0, counter: int = 0, step: int = 0,
                limit: int = -1, cond: int = 0, flag: int = 0) -> None:
        if set_mask and not self.conditional:
            raise ConditionalGraphError("these control kernels were built without conditional-node support")
        self._control((1,), (1,), (np.uint64(then_h), np.uint64(else_h), np.uint32(set_mask), np.uint64(counter),
                                   np.int64(step), np.int64(limit), np.uint64(cond), np.uint64(flag)))

    def copy(self, table: CopyTable, counter: int = 0, length: int = 0, reverse: bool = False) -> None:
        if len(table):
            self._copy((table.blocks, len(table)), (_COPY_BLOCK,),
                       (np.uint64(table.table.data.ptr), np.uint64(counter), np.int64(length), np.int32(reverse)))

    def copy_launch(self, table_ptr: int, rows: int, biggest: int) -> Callable[[], None]:
        """A launch of ``rows`` entries (without steps) of the device table at ``table_ptr``,
        its arguments built once: a run's device-input copies in one call. Entries whose
        source is 0 are skipped."""
        fn, grid, block = self._copy, (_copy_blocks(biggest), rows), (_COPY_BLOCK,)
        args = (np.uint64(table_ptr), np.uint64(0), np.int64(0), np.int32(0))
        return lambda: fn(grid, block, args)


_kernels: dict[tuple[int, bool], tuple[ControlKernels | None, str | None]] = {}
_kernels_lock = threading.Lock()


def control_kernels(rt) -> ControlKernels:
    """The host-mode kernels of ``rt`` (no conditional handles)."""
    kernels, reason = _cached(rt, False)
    if kernels is None:
        raise RlxError(f"cuda: the control-flow kernels failed to build: {reason}")
    return kernels


def conditional_kernels(rt) -> tuple[ControlKernels | None, str | None]:
    """``(kernels, None)`` when conditional graph nodes work on ``rt``'s device (driver,
    symbols, kernel build), else ``(None, why not)``."""
    return _cached(rt, True)


def _cached(rt, conditional: bool) -> tuple[ControlKernels | None, str | None]:
    key = (rt.index, conditional)
    with _kernels_lock:
        if key not in _kernels:
            try:
                if conditional:
                    version = int(rt.cp.cuda.runtime.driverGetVersion())
                    if version < _MIN_DRIVER:
                        raise ConditionalGraphError(f"the CUDA driver is {version // 1000}.{version % 1000 // 10}; "
                                                    f"conditional graph nodes need 12.4 or newer")
                    Driver.get()
                _kernels[key] = (ControlKernels(rt, conditional), None)
            except Exception as e:  # any failure means: no conditional nodes here (the host path remains)
                _kernels[key] = (None, f"{type(e).__name__}: {e}")
        return _kernels[key]


# --- building graphs ------------------------------------------------------------------------
class Chain:
    """Fills ``graph`` in program order: :meth:`work` queues capturable device work (run
    on CuPy's current stream), :meth:`branch` adds conditional nodes after everything
    so far and returns their body graphs, :meth:`body` chains into such a body."""

    def __init__(self, builder: "_Builder", graph: int, deps: Sequence[int] = ()):
        self.builder, self.graph = builder, graph
        self.frontier = list(deps)
        self._pending: list[Callable[[], None]] = []
        self._nodes = 0

    def work(self, fn: Callable[[], None]) -> None:
        self._pending.append(fn)

    def handle(self) -> int:
        """A new conditional handle of this graph (set by a control kernel before its node)."""
        return self.builder.drv.handle_create(self.graph, self.builder.ctx)

    def branch(self, conditionals: Sequence[tuple[int, int]]) -> list[int]:
        """One conditional node per ``(handle, IF | WHILE)``, all after the work so far;
        later work follows all of them. Returns their body graphs."""
        self._flush()
        drv, nodes, bodies = self.builder.drv, [], []
        for handle, kind in conditionals:
            node, body = drv.add_conditional(self.graph, self.frontier, handle, kind, self.builder.ctx)
            nodes.append(node)
            bodies.append(body)
        self.frontier = nodes
        self._nodes += len(nodes)
        return bodies

    def body(self, graph: int) -> "Chain":
        return Chain(self.builder, graph)

    def close(self) -> None:
        """Capture what is queued; a graph left without nodes gets an empty node (a
        conditional body must not be empty)."""
        self._flush()
        if not self._nodes:
            self.frontier = [self.builder.drv.add_empty(self.graph, self.frontier)]
            self._nodes = 1

    def _flush(self) -> None:
        if not self._pending:
            return
        fns, self._pending = self._pending, []
        frontier = self.builder.capture_into(self.graph, self.frontier, fns)
        if frontier != self.frontier:
            self._nodes += 1
        self.frontier = frontier


class _Builder:
    def __init__(self, drv: Driver, cp, stream):
        self.drv, self.cp, self.stream = drv, cp, stream
        self.ctx = drv.context()

    def capture_into(self, graph: int, deps: Sequence[int], fns: Sequence[Callable[[], None]]) -> list[int]:
        """Stream-capture ``fns`` into ``graph`` after ``deps``; the new frontier."""
        s = self.stream.ptr
        self.drv.begin_capture(s, graph, deps)
        try:
            with self.stream:
                for fn in fns:
                    fn()
            frontier = self.drv.capture_frontier(s)
        finally:
            self.drv.end_capture(s)
        return frontier


class DeviceGraph:
    """An instantiated graph (with its template, which owns the conditional handles)."""

    def __init__(self, drv: Driver, graph: int, exe: int):
        self.drv, self.graph, self.exe = drv, graph, exe

    def launch(self, stream) -> None:
        self.drv.launch(self.exe, stream.ptr)

    def __del__(self):
        try:
            self.drv.exec_destroy(self.exe)
            self.drv.graph_destroy(self.graph)
        except Exception:  # interpreter shutdown, a dead context: nothing left to free
            pass


def build(cp, populate: Callable[[Chain], None], drv: Driver | None = None) -> DeviceGraph:
    """A graph filled by ``populate(chain)``, instantiated. Work is captured on a stream of
    its own after the current stream drained (as ``capture`` does)."""
    drv = drv or Driver.get()
    cp.cuda.get_current_stream().synchronize()
    builder = _Builder(drv, cp, cp.cuda.Stream(non_blocking=True))
    graph = drv.graph_create()
    try:
        chain = Chain(builder, graph)
        populate(chain)
        chain.close()
        exe = drv.instantiate(graph)
    except BaseException:
        drv.graph_destroy(graph)
        raise
    return DeviceGraph(drv, graph, exe)


def capture(cp, fns: Sequence[Callable[[], None]]) -> Any:
    """One CuPy CUDA graph of ``fns`` (plain capture on a stream of its own, after the
    current stream drained so that the work's first eager run is complete)."""
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.get_current_stream().synchronize()
    with stream:
        stream.begin_capture()
        try:
            for fn in fns:
                fn()
        finally:
            graph = stream.end_capture()
    return graph

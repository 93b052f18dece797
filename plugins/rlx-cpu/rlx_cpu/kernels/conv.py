"""Convolution by the route measured fastest for its geometry; pooling in numba.

Routes (per image; a 1-D convolution is the 2-D one with a height of 1):

* ``pointwise`` -- a 1x1 convolution with unit strides and no padding: its input already
  is the column matrix, one ``[Co/g, C/g] @ [C/g, H*W]`` matmul per image and group.
* ``channels_last`` -- im2col (numba) + ``[Ho*Wo, K] @ [K, Co]`` (the column matrix read
  transposed), which BLAS often computes faster than the NCHW product. The result, in
  scratch, is handed on as an NCHW view: the bias and a fused epilogue read it from there
  while writing the output (a transposing pass). One group only.
* ``nchw`` -- im2col + ``[Co/g, K] @ [K, Ho*Wo]`` per group, straight into the output.
* ``direct`` -- a generated numba kernel (``codegen.direct_conv_source``) over a padded
  copy of the image, straight into the output: no column matrix at all. Unit strides,
  one group. It wins where im2col + GEMM are inefficient: few input channels. float64
  only now: for float32 ``rows`` does the same 2-3x faster (each route offered costs a
  kernel compile on a cold cache).
* ``tiled`` -- a generated numba kernel with explicit 16-float vectors
  (``rlx_cpu.jit.simd``) over a padded copy of the image: tiles of 16-32 output channels
  by 8-16 output columns stay in registers over every tap and input channel (input
  elements broadcast, weights packed as ``[Co/16, kh, kw, C, 16]`` once for constant
  weights, else by one call per run), written channels last like ``channels_last``'s
  result. float32, one group, any strides and dilations; about 200-270 GFLOP/s on one
  core of this machine against the direct kernel's 100. Offered only where ``rows`` is
  not (a column stride above 1): it lost to ``rows`` on every unit-stride conv timed
  here, by its transposing epilogue, and each route offered costs a kernel compile.
* ``rows`` -- the same register tiling vectorized along the output row instead
  (``simd.rows_conv_source``): 8 output channels by 2 rows by 16 columns, input rows
  loaded as vectors (the row's last tile masked), weights packed ``[Co/8, kh, kw, C, 8]``
  and broadcast, written straight into the NCHW output: no transposition. float32, one
  group, unit column stride; 220-260 GFLOP/s on one core here.
* ``rows2`` -- ``rows`` with its channel blocks split between numba's two threads
  (OpenMP) while the machine is quiet (``rlx_cpu.load``) and calls come back to back
  (``conv_simd.Sustained``), else on one thread: a parallel region's barrier waits for a
  descheduled or sleeping thread (8 ms at the 90th percentile with other work on the
  machine; 5-8 ms for a worker asleep after 50 ms without work), as OpenBLAS's threads
  do. A run that takes far longer than its estimate reports a stall. OpenMP's workers
  spin between regions (a helper thread woken per call takes 20-35 us on this VM: more
  than it saves). Built as ``rows`` in a graph with GEMMs OpenBLAS may thread.

``conv_route`` times the eligible routes once per geometry and dtype on sample data
(GEMM routes on one BLAS thread and on two, each route followed by the pass that
brings its result into an NCHW output, since that is where the channels-last route pays
its transpose) and stores
the choice with the kernel cache (``rlx_cpu.planner``: measured again in the background
if the machine was not known to be quiet). Where ``rows`` wins, ``rows2`` is raced
against it by the background planner only (a choice of its own); until then ``rows2``
serves, its two-core kernel compiled on a thread of its own at the first sustained
quiet call (``conv_simd.Deferred``: the compile of the graph does not wait for it, and
calls run on one core meanwhile). The exported CNN's 16->32 3x3 conv at 64x64 takes
107 us on two cores against 179 us on one (onnxruntime, two threads: 118 us).

The rows routes also apply the step's bias and relu as they store results: a fused
conv (+ bias) -> relu step is then one kernel call (``absorbed_step``), each result
written once, by the core that computed it. The SIMD routes' calls are built in
``conv_simd``.
"""
from __future__ import annotations

import hashlib

import numpy as np

from rlx_core import DType, Graph, Node, Ref, Shape

from ..cache import Decisions
from ..jit import generated_kernel, library, specialize
from ..jit.codegen import direct_conv_source, pool_source
from ..jit.simd import LANES
from ..planner import choice
from ..timing import interleaved_times
from . import Bound, Call, kernel
from .conv_simd import Epilogue, WhileQuiet, rows_calls, tiled_calls
from .linalg import OPENBLAS_SINGLE_THREADED

__all__ = ["conv_calls", "conv_scratch", "result_in_scratch", "conv_route", "ROUTES", "Epilogue", "applies_epilogue",
           "absorbed_step"]

_FAST = frozenset({DType.F32, DType.F64})
ROUTES = ("pointwise", "channels_last", "nchw", "direct", "tiled", "rows", "rows2")
_CHANNELS_LAST = frozenset({"channels_last", "tiled"})  # routes leaving an [N, Ho*Wo, Co] result in scratch
_DIRECT_MAX_TAPS = 49  # the direct kernel writes every tap out: keep its code small
_DIRECT_BLOCK_TAPS = 25  # up to this many taps, two output channels share each input load
_decisions = Decisions()


class _Geometry:
    """A conv node's geometry as 2-D (height 1 for a 1-D conv)."""

    def __init__(self, node: Node, graph: Graph):
        a = node.attrs
        w = graph.shape_of(node.inputs[1]).dims
        x = graph.shape_of(node.inputs[0]).dims
        if len(a["strides"]) == 2:
            self.strides, self.pads, self.dilations = a["strides"], a["pads"], a["dilations"]
            self.kernel, self.image = tuple(w[2:]), tuple(x[1:])
        else:
            self.strides, self.dilations = (1,) + a["strides"], (1,) + a["dilations"]
            self.pads = (0, a["pads"][0], 0, a["pads"][1])
            self.kernel, self.image = (1, w[2]), (x[1], 1, x[2])
        self.groups = a["groups"]
        self.out_channels = node.shape.dims[1]
        self.out_hw = (1,) + node.shape.dims[2:] if len(node.shape.dims) == 3 else node.shape.dims[2:]
        self.dtype = node.shape.dtype

    @property
    def out_blocks(self) -> int:
        """Blocks of 16 output channels (the tiled route's result rounds Co up to them)."""
        return -(-self.out_channels // LANES)

    def tile(self) -> tuple[int, int, int]:
        """The tiled route's ``(blocks, positions, tail)``: two 16-channel blocks by 8
        columns (16 accumulators) where there are two blocks, else one by 16."""
        blocks, positions = (2, 8) if self.out_blocks >= 2 else (1, 16)
        return blocks, positions, self.out_hw[1] % positions

    @property
    def padded(self) -> tuple[int, int, int]:
        """The padded image ``[C, H + pads, W + pads]`` the direct route reads."""
        c, h, w = self.image
        top, left, bottom, right = self.pads
        return c, h + top + bottom, w + left + right

    def columns(self) -> tuple[int, int]:
        """The column matrix of one image and group ``[C/groups * kh * kw, Ho * Wo]``."""
        return self.image[0] // self.groups * self.kernel[0] * self.kernel[1], self.out_hw[0] * self.out_hw[1]

    def routes(self) -> list[str]:
        if self.kernel == (1, 1) and self.strides == (1, 1) and not any(self.pads):
            return ["pointwise"]
        if self.groups != 1:
            return ["nchw"]
        routes = ["channels_last", "nchw"]
        if self.dtype is DType.F32:  # the SIMD routes: rows where it applies, else tiled (see the docstring)
            return routes + (["rows", "rows2"] if self.strides[1] == 1 else ["tiled"])
        if self.strides == (1, 1) and self.kernel[0] * self.kernel[1] <= _DIRECT_MAX_TAPS:
            routes.append("direct")
        return routes

    def key(self) -> str:
        """The stored choice's key: the geometry and the routes it was chosen among (a
        choice made before a route existed is measured again)."""
        text = repr((self.image, self.kernel, self.strides, self.pads, self.dilations, self.groups,
                     self.out_channels, self.dtype.name, tuple(self.routes())))
        return "conv:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def conv_route(node: Node, graph: Graph) -> str:
    """The route computing ``node`` (see the module docstring)."""
    geometry = _Geometry(node, graph)
    routes = geometry.routes()
    if len(routes) == 1:
        return routes[0]
    route = choice(_decisions, geometry.key(), lambda: _fastest_route(geometry, routes), valid=routes.__contains__)
    if route == "rows" and "rows2" in routes:  # two cores: raced in the background, rows2 until then
        route = choice(_decisions, geometry.key() + ":two-cores", lambda: _two_cores(geometry),
                       valid=("rows", "rows2").__contains__, default="rows2")
    return route


def result_in_scratch(node: Node, graph: Graph) -> bool:
    """Whether ``conv_calls`` leaves the result in its scratch (channels last) rather
    than in ``out``."""
    return node.shape.dtype in _FAST and conv_route(node, graph) in _CHANNELS_LAST


def conv_scratch(node: Node, graph: Graph) -> list[Shape]:
    """The route's buffers: the column matrix of one image and group (+ for channels
    last the result ``[N, Ho * Wo, Co]``), or the direct route's padded image."""
    if node.shape.dtype not in _FAST:
        return []
    return _scratch_dims(_Geometry(node, graph), conv_route(node, graph), node.shape.dims[0])


def _scratch_dims(geometry: _Geometry, route: str, batch: int) -> list[Shape]:
    dtype = geometry.dtype
    padded = [Shape(geometry.padded, dtype)] if any(geometry.pads) else []
    if route == "direct":
        return padded
    if route in ("rows", "rows2"):  # reads the padding as masked-off lanes; copies an input that is not C-contiguous
        return [Shape(geometry.image, dtype)]
    if route == "tiled":
        result = Shape((batch, geometry.columns()[1], geometry.out_blocks * LANES), dtype)
        return [Shape(geometry.padded, dtype), result]
    if route == "pointwise":
        return []
    scratch = [Shape(geometry.columns(), dtype)]
    if route == "channels_last":
        scratch.append(Shape((batch, geometry.columns()[1], geometry.out_channels), dtype))
    return scratch


def _image_rows(a: np.ndarray) -> np.ndarray:
    """``[N, C, *spatial]`` as ``[N, C, H, W]`` (height 1 for 1-D)."""
    return a if a.ndim == 4 else np.reshape(a, a.shape[:2] + (1,) + a.shape[2:], copy=False)


def conv_calls(node: Node, graph: Graph, x: np.ndarray, w: np.ndarray, out: np.ndarray | None,
               scratch: list[np.ndarray], epilogue: Epilogue | None = None) -> tuple[list[Call], np.ndarray]:
    """Calls computing ``conv(x, w)`` (no bias; with ``epilogue``, which only routes that
    ``apply_epilogue`` take: + bias, relu), and the array that then holds it: a view of
    the scratch (``result_in_scratch``) or ``out``."""
    geometry = _Geometry(node, graph)
    fixed = graph.nodes[node.inputs[1].node].kind == "constant"
    route = conv_route(node, graph)
    if route == "rows2" and _blas_on_several_cores(graph):  # an OpenMP region next to them stalls
        route = "rows"
    return _route_calls(geometry, route, _image_rows(x), _image_rows(w), out, scratch, node.shape.dims, fixed,
                        epilogue)


def _blas_on_several_cores(graph: Graph) -> bool:
    """Whether a run of ``graph`` may make GEMMs OpenBLAS threads (a matmul, or a conv
    routed through one, above OpenBLAS's one-thread size): their threads spin after a
    call, and next to them an OpenMP region took 4-7 ms instead of 25 us (and the GEMM
    4.5 ms instead of 0.56) on this 2-core machine."""
    for n in graph.nodes:
        if n.kind == "matmul" and n.shape.dtype in _FAST:
            a, b = (graph.shape_of(r).dims for r in n.inputs)
            rows = int(np.prod(a[:-1])) if len(b) == 2 else (a[-2] if len(a) > 1 else 1)
            if rows * (b[-1] if len(b) > 1 else 1) * a[-1] > OPENBLAS_SINGLE_THREADED:
                return True
        if n.kind == "conv" and n.shape.dtype in _FAST:
            geometry = _Geometry(n, graph)
            if conv_route(n, graph) in ("pointwise", "channels_last", "nchw"):
                k, positions = geometry.columns()
                if geometry.out_channels // geometry.groups * k * positions > OPENBLAS_SINGLE_THREADED:
                    return True
    return False


_EPILOGUE_ROUTES = frozenset({"rows", "rows2"})


def applies_epilogue(node: Node, graph: Graph) -> bool:
    """Whether ``node``'s route applies an ``Epilogue`` itself (float32 rows routes)."""
    return node.shape.dtype is DType.F32 and conv_route(node, graph) in _EPILOGUE_ROUTES


def absorbed_step(step, graph: Graph) -> bool:
    """Whether a fused step is exactly conv (+ bias) -> relu, with a route applying that
    epilogue: the conv's kernel then computes the whole step (each result stored once,
    by the thread that computed it)."""
    if step.anchor is None or step.anchor.kind != "conv" or step.norm is not None or len(step.elementwise) != 1:
        return False
    relu = step.elementwise[0]
    return relu.kind == "relu" and tuple(relu.inputs) == (Ref(step.anchor.id),) and \
        tuple(step.outputs) == (Ref(relu.id),) and applies_epilogue(step.anchor, graph)


def _route_calls(geometry: _Geometry, route: str, x4: np.ndarray, w4: np.ndarray, out: np.ndarray | None,
                 scratch: list[np.ndarray], dims: tuple[int, ...], fixed_weights: bool = False,
                 epilogue: Epilogue | None = None) -> tuple[list[Call], np.ndarray]:
    n, groups, co = x4.shape[0], geometry.groups, geometry.out_channels
    positions = geometry.columns()[1]
    out4 = _image_rows(out) if out is not None else None
    if route == "direct":
        return _direct_calls(geometry, x4, w4, out4, scratch), out
    if route in ("rows", "rows2"):
        return rows_calls(geometry, x4, w4, out4, scratch, fixed_weights, route == "rows2", epilogue), out
    if route == "tiled":
        calls = tiled_calls(geometry, x4, w4, scratch, fixed_weights)
        return calls, np.reshape(scratch[-1][:, :, :co].transpose(0, 2, 1), dims, copy=False)
    weights = np.reshape(w4, (groups, co // groups, -1), copy=False)
    c_group = x4.shape[1] // groups
    if route == "pointwise":
        results = np.reshape(out4, (n, groups, co // groups, positions), copy=False)
        inputs = np.reshape(x4, (n, groups, c_group, positions), copy=False)
        return [Call(np.matmul, (weights[g], inputs[i, g]), {"out": results[i, g]})
                for i in range(n) for g in range(groups)], out
    cols = scratch[0]
    (sh, sw), (ph, pw, _, _), (dh, dw) = geometry.strides, geometry.pads, geometry.dilations
    kh, kw = geometry.kernel
    channels_last = route == "channels_last"
    results = scratch[1] if channels_last else np.reshape(out4, (n, groups, co // groups, positions), copy=False)
    calls = []
    for i in range(n):
        for g in range(groups):
            args = (x4[i, g * c_group:(g + 1) * c_group], cols, kh, kw, sh, sw, ph, pw, dh, dw, geometry.out_hw[1])
            calls.append(Call(specialize(library().im2col, *args), args))
            if channels_last:
                calls.append(Call(np.matmul, (cols.T, weights[0].T), {"out": results[i]}))
            else:
                calls.append(Call(np.matmul, (weights[g], cols), {"out": results[i, g]}))
    if not channels_last:
        return calls, out
    return calls, np.reshape(results.transpose(0, 2, 1), dims, copy=False)


def _direct_calls(geometry: _Geometry, x4: np.ndarray, w4: np.ndarray, out4: np.ndarray,
                  scratch: list[np.ndarray]) -> list[Call]:
    taps = geometry.kernel[0] * geometry.kernel[1]
    block = 2 if geometry.out_channels % 2 == 0 and taps <= _DIRECT_BLOCK_TAPS else 1
    direct = generated_kernel(direct_conv_source(geometry.kernel, geometry.dilations, block))
    top, left = geometry.pads[:2]
    calls = []
    for i in range(x4.shape[0]):
        image = x4[i]
        if scratch:
            pad_args = (image, scratch[0], top, left)
            calls.append(Call(specialize(library().pad2d, *pad_args), pad_args))
            image = scratch[0]
        args = (image, w4, out4[i])
        calls.append(Call(specialize(direct, *args), args))
    return calls


def _fastest_route(geometry: _Geometry, routes: list[str]) -> str:
    """Time every route but ``rows2`` (``_two_cores``) on sample data of one image, each
    followed by its pass into an NCHW output (a relu; the routes applying an epilogue
    apply it as they store, as in a conv + relu step): routes with a GEMM on one BLAS
    thread, and while the machine is quiet also on OpenBLAS's own (a quiet machine's run
    may give the GEMM both cores; on a loaded one they stall), each route by its faster
    way."""
    from ..load import QUIET, machine_load
    from ..threads import OWN_THREADS, blas_threads
    x4, w4, out = _samples(geometry)
    control = blas_threads()
    both = control is not None and machine_load().state() == QUIET
    ways = {}
    for route in (r for r in routes if r != "rows2"):
        calls, run = _timed_route(geometry, route, x4, w4, out)
        ways[route] = Call(run, threads=1)
        if both and any(c.fn is np.matmul for c in calls):
            ways[f"{route} openblas"] = Call(run, threads=OWN_THREADS)
    return _fastest_way(ways, control)


def _two_cores(geometry: _Geometry) -> str | None:
    """``rows2`` or ``rows``, raced on their own on a quiet machine (None on a loaded
    one: not a clean measurement). A background measurement (``rlx_cpu.planner``): the
    two-core kernel's compile (1.5 s) stays out of a compile, and next to OpenBLAS's
    spinning threads (a foreground measurement's other routes) an OpenMP region stalls
    for milliseconds."""
    from ..load import QUIET, machine_load
    from ..threads import blas_threads
    if machine_load().state() != QUIET:
        return None
    x4, w4, out = _samples(geometry)
    return _fastest_way({r: Call(_timed_route(geometry, r, x4, w4, out)[1], threads=1) for r in ("rows", "rows2")},
                        blas_threads())


def _samples(geometry: _Geometry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Input, weights and output of one image to time routes on."""
    rng = np.random.default_rng(0)
    dtype = geometry.dtype.np
    x4 = rng.uniform(-1, 1, (1,) + geometry.image).astype(dtype)
    w4 = rng.uniform(-1, 1, (geometry.out_channels, geometry.image[0] // geometry.groups) + geometry.kernel
                     ).astype(dtype)
    return x4, w4, np.empty((1, geometry.out_channels) + geometry.out_hw, dtype)


def _timed_route(geometry: _Geometry, route: str, x4: np.ndarray, w4: np.ndarray, out: np.ndarray):
    """A route's calls, and the function ``_fastest_route`` times: they and the pass into
    ``out``."""
    scratch = [np.empty(s.dims, x4.dtype) for s in _scratch_dims(geometry, route, 1)]
    if route in _EPILOGUE_ROUTES:  # the relu as the results are stored
        calls, _ = _route_calls(geometry, route, x4, w4, out, scratch, out.shape, epilogue=Epilogue(None, True))
        # rows2 by its two-core kernel, as it runs in a loop of runs on a quiet machine
        calls = [c._replace(fn=c.fn.both) if isinstance(c.fn, WhileQuiet) else c for c in calls]
        return calls, _sequence(calls)
    calls, result = _route_calls(geometry, route, x4, w4, out, scratch, out.shape)
    finish = Call(np.copyto, (out, result)) if result is not out else Call(np.maximum, (out, 0), {"out": out})
    return calls, _sequence(calls + [finish])


def _fastest_way(ways: dict[str, Call], control) -> str:
    """The route of the way with the lowest median over interleaved rounds."""
    from ..threads import measure
    if control is None:
        times = interleaved_times({name: c.fn for name, c in ways.items()}, rounds=5)
    else:
        times = measure(ways, control, rounds=5)
    return min(times, key=lambda name: float(np.median(times[name]))).split()[0]


def _sequence(calls: list[Call]):
    """The calls, made twice: the timed second pass finds the threads a run's earlier
    kernels keep busy (OpenMP's, OpenBLAS's) spinning, as in a run, not asleep."""
    def run():
        for _ in range(2):
            for c in calls:
                c.fn(*c.args, **c.kwargs)
    return run


@kernel("conv", scratch=lambda step, graph: conv_scratch(step.node, graph))
def conv_step(b: Bound):
    node = b.node
    if node.shape.dtype not in _FAST:
        return None
    out = b.outs[0]
    if len(b.ins) > 2 and applies_epilogue(node, b.graph):
        return conv_calls(node, b.graph, b.ins[0], b.ins[1], out, b.scratch, Epilogue(b.ins[2], False))[0]
    calls, result = conv_calls(node, b.graph, b.ins[0], b.ins[1], out, b.scratch)
    if len(b.ins) > 2:
        bias = b.ins[2].reshape((-1,) + (1,) * (out.ndim - 2))
        calls.append(Call(np.add, (result, bias), {"out": out}))
    elif result is not out:
        calls.append(Call(np.copyto, (out, result)))
    return calls


@kernel("pool2d")
def pool_step(b: Bound):
    """Windows inside the input: a kernel with the geometry as constants; else (padding,
    ceil mode's partial windows) the general kernel."""
    node, x, y = b.node, b.ins[0], b.outs[0]
    if node.shape.dtype not in _FAST:
        return None
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["kernel"], a["strides"], a["dilations"]
    ph, pw, ph_end, pw_end = a["pads"]
    if y.size == 0:
        return []
    inside = not any(a["pads"]) and (y.shape[2] - 1) * sh + (kh - 1) * dh < x.shape[2] \
        and (y.shape[3] - 1) * sw + (kw - 1) * dw < x.shape[3]
    if inside:
        source = pool_source(a["mode"] == "max", a["kernel"], a["strides"], a["dilations"], node.shape.dtype)
        return Call(specialize(generated_kernel(source), x, y), (x, y))
    args = (x, y, a["mode"] == "max", kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end, a["count_include_pad"])
    return Call(specialize(library().pool2d, *args), args)

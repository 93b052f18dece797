"""Lowering: a legalized graph -> the list of :class:`~rlx_cuda.steps.Step` s that run it.

Pure Python: it generates CUDA C sources, launch geometry and cuBLAS parameters, so
all of it is testable without a GPU. ``LOWERINGS`` maps each op kind to its lowering
(``fn(ctx, node) -> Step``); elementwise runs are fused first (``rlx_cuda.fusion``).
Kinds served by CuPy library calls or driven from the host (cumsum, topk,
dense_solve, the FFTs, control flow, ort-mode rng) become :class:`Host` actions.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from rlx_core.ir import DType, Graph, Node, Ref, Shape

from .dtypes import CUDA_R, device_type
from .fusion import fusion_groups, group_outputs
from .kernels.elementwise import Access, FusedKernel, FusedOp, broadcast_access, contiguous_strides
from .kernels.index import (Col2imKernel, GatherElementsKernel, GatherKernel, Im2colKernel, PadKernel,
                            Pool2dKernel, RopeKernel, ScatterAddKernel)
from .kernels.philox import PhiloxKernel
from .kernels.rows import (ArgReduceKernel, AttentionSoftmaxKernel, NormKernel, ReduceKernel, SoftmaxKernel)
from .launch import elementwise_grid, row_block, row_grid
from .steps import Buf, Copy, Gemm, Host, Launch, Memset, Step

__all__ = ["LowerContext", "lower_graph", "LOWERINGS", "HOST_KINDS", "ALIAS_KINDS", "PERSISTENT_KINDS",
           "gemm", "COMPUTE_32F", "COMPUTE_32F_FAST_TF32", "COMPUTE_64F", "SCRATCH_ALIGN"]

COMPUTE_32F, COMPUTE_64F, COMPUTE_32F_FAST_TF32 = 68, 70, 77
SCRATCH_ALIGN = 256
ALIAS_KINDS = frozenset({"reshape"})             # outputs share their input's bytes
PERSISTENT_KINDS = frozenset({"param", "constant", "arange"})  # own buffers, set before runs
HOST_KINDS = frozenset({"cumsum", "topk", "dense_solve", "fft", "rfft", "irfft", "if", "while", "scan"})
DEFAULT_ATTENTION_SCORES_BYTES = 256 << 20


@dataclass
class LowerContext:
    """What lowering needs besides the node: the graph and the compile-time choices."""

    graph: Graph
    tf32: bool = False
    fuse: bool = True
    attention_scores_bytes: int = DEFAULT_ATTENTION_SCORES_BYTES
    rng_mode: str = "philox"

    def shape(self, ref: Ref) -> Shape:
        return self.graph.shape_of(ref)


def lower_graph(ctx: LowerContext) -> list[Step]:
    """Every step of ``ctx.graph`` in execution order (sources, params, aliases excluded)."""
    steps = []
    for members in fusion_groups(ctx.graph, ctx.fuse):
        first = ctx.graph.nodes[members[0]]
        if first.kind in ALIAS_KINDS:
            continue
        if len(members) > 1 or first.kind in _ELEMENTWISE:
            steps.append(_fused_step(ctx, members))
        else:
            steps.append(LOWERINGS[first.kind](ctx, first))
    return steps


# --- elementwise groups -------------------------------------------------------------
from .kernels.elementwise import ELEMENTWISE_KINDS as _ELEMENTWISE  # noqa: E402


def _operand_access(ctx: LowerContext, node: Node, slot: int, ref: Ref, loop_dims) -> Access:
    """How operand ``slot`` of elementwise ``node`` is read over ``loop_dims``."""
    s = ctx.shape(ref)
    if node.kind in ("quantize", "dequantize") and slot > 0 and s.rank == 1:
        axis = node.attrs["axis"]
        dims = tuple(s.dims[0] if d == axis else 1 for d in range(len(loop_dims)))
        return broadcast_access(s.dtype, dims, loop_dims)
    return broadcast_access(s.dtype, s.dims, loop_dims)


def _fused_step(ctx: LowerContext, members: list[int]) -> Step:
    g = ctx.graph
    dims = g.nodes[members[0]].outputs[0].dims
    value_of: dict[Ref, int] = {}
    inputs: list[Access] = []
    input_refs: list[Ref] = []
    ops: list[FusedOp] = []
    for nid in members:  # first pass: external operands become kernel inputs
        node = g.nodes[nid]
        for slot, r in enumerate(node.inputs):
            if r.node in members:
                continue
            acc = _operand_access(ctx, node, slot, r, dims)
            key = (r, acc)
            if key not in value_of:
                value_of[key] = len(inputs)
                inputs.append(acc)
                input_refs.append(r)
    for nid in members:
        node = g.nodes[nid]
        args = []
        for slot, r in enumerate(node.inputs):
            args.append(value_of[Ref(*r)] if r.node in members else
                        value_of[(r, _operand_access(ctx, node, slot, r, dims))])
        attrs = tuple(sorted((k, v) for k, v in node.attrs.items() if k in ("fmod",)))
        ops.append(FusedOp(node.kind, tuple(args), node.outputs[0].dtype, attrs))
        value_of[Ref(nid, 0)] = len(inputs) + len(ops) - 1
    outs = group_outputs(g, members)
    kernel = FusedKernel(dims, inputs, ops,
                         [(value_of[r], broadcast_access(ctx.shape(r).dtype, dims, dims)) for r in outs])
    label = "fused[" + ",".join(g.nodes[n].kind for n in members) + "]" if len(members) > 1 else g.nodes[members[0]].label
    step = Step(label, tuple(input_refs), tuple(outs))
    _launch_elementwise(step, kernel, [Buf(r) for r in input_refs] + [Buf(r) for r in outs])
    return step


def _launch_elementwise(step: Step, kernel: FusedKernel, bufs: list[Buf]) -> None:
    grid, block = elementwise_grid(kernel.size)
    if grid:
        step.actions.append(Launch(kernel.source(), grid, block, tuple(bufs)))


def _copy_kernel(dtype: DType, loop_dims, src: Access, dst: Access) -> FusedKernel:
    return FusedKernel(tuple(loop_dims), [src], [FusedOp("copy", (0,), dtype)], [(1, dst)])


# --- movement ---------------------------------------------------------------------------
def _view_step(ctx: LowerContext, node: Node, src: Access) -> Step:
    """A step materializing a strided view ``src`` of the node's input as its output."""
    out = node.outputs[0]
    step = Step(node.label, (node.inputs[0],), (Ref(node.id),))
    dst = broadcast_access(out.dtype, out.dims, out.dims)
    _launch_elementwise(step, _copy_kernel(out.dtype, out.dims, src, dst), [Buf(node.inputs[0]), Buf(Ref(node.id))])
    return step


def _transpose(ctx, node):
    x = ctx.shape(node.inputs[0])
    st = contiguous_strides(x.dims)
    return _view_step(ctx, node, Access(x.dtype, 0, tuple(st[p] for p in node.attrs["perm"])))


def _slice(ctx, node):
    x = ctx.shape(node.inputs[0])
    st = contiguous_strides(x.dims)
    a = node.attrs
    offset = sum(start * s for start, s, n in zip(a["starts"], st, node.outputs[0].dims) if n)
    return _view_step(ctx, node, Access(x.dtype, offset, tuple(step * s for step, s in zip(a["steps"], st))))


def _expand(ctx, node):
    x = ctx.shape(node.inputs[0])
    return _view_step(ctx, node, broadcast_access(x.dtype, x.dims, node.outputs[0].dims))


def _frame(ctx, node):
    x = ctx.shape(node.inputs[0])
    st, axis, hop = contiguous_strides(x.dims), node.attrs["axis"], node.attrs["hop"]
    strides = st[:axis] + (hop * st[axis], st[axis]) + st[axis + 1:]
    return _view_step(ctx, node, Access(x.dtype, 0, strides))


def _concat(ctx, node):
    out = node.outputs[0]
    axis, ost = node.attrs["axis"], contiguous_strides(out.dims)
    step = Step(node.label, tuple(node.inputs), (Ref(node.id),))
    start = 0
    for r in node.inputs:
        x = ctx.shape(r)
        kernel = _copy_kernel(out.dtype, x.dims, broadcast_access(x.dtype, x.dims, x.dims),
                              Access(out.dtype, start * ost[axis], ost))
        _launch_elementwise(step, kernel, [Buf(r), Buf(Ref(node.id))])
        start += x.dims[axis]
    return step


def _split(ctx, node):
    x = ctx.shape(node.inputs[0])
    axis, st = node.attrs["axis"], contiguous_strides(x.dims)
    step = Step(node.label, (node.inputs[0],), tuple(Ref(node.id, i) for i in range(len(node.outputs))))
    start = 0
    for i, out in enumerate(node.outputs):
        kernel = _copy_kernel(out.dtype, out.dims, Access(x.dtype, start * st[axis], st),
                              broadcast_access(out.dtype, out.dims, out.dims))
        _launch_elementwise(step, kernel, [Buf(node.inputs[0]), Buf(Ref(node.id, i))])
        start += out.dims[axis]
    return step


def _pad(ctx, node):
    x, out = ctx.shape(node.inputs[0]), node.outputs[0]
    value = _literal(node.attrs["value"], out.dtype)
    kernel = PadKernel(out.dtype, x.dims, out.dims, tuple(node.attrs["pads"][0::2]), node.attrs["mode"], value)
    return _single(node, kernel.source(), elementwise_grid(out.size), [node.inputs[0], Ref(node.id)])


def _literal(value: float, dtype: DType) -> str:
    """The ``cast`` of float ``value`` to ``dtype``, as a C expression in its compute type."""
    from rlx_core.reference.elementwise import cast_array
    v = cast_array(np.asarray(value, np.float64), dtype)
    if dtype.is_complex:
        part = device_type(dtype.real).compute
        return f"rlx_cplx({_literal(value, dtype.real)}, ({part})0)"
    if dtype.is_bool:
        return "true" if bool(v) else "false"
    if dtype.is_int:
        return f"(({device_type(dtype).compute}){int(v)}LL)"
    f = float(v)
    ct = device_type(dtype).compute
    if math.isnan(f):
        return f"rlx_nan(({ct})0)"
    if math.isinf(f):
        return f"({'-' if f < 0 else ''}rlx_inf_{'d' if ct == 'double' else 'f'}())"
    return f"(({ct}){f!r})"


def _single(node: Node, source: str, geometry: tuple[int, int], refs: list[Ref], *extra) -> Step:
    """A step with one launch over ``refs`` (inputs then outputs) plus scalar ``extra`` args."""
    reads = tuple(r for r in refs if r.node != node.id)
    writes = tuple(r for r in refs if r.node == node.id)
    step = Step(node.label, reads, writes)
    grid, block = geometry
    if grid:
        step.actions.append(Launch(source, grid, block, tuple(Buf(r) for r in refs) + tuple(extra)))
    return step


def _gather(ctx, node):
    table, indices = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    axis = node.attrs["axis"]
    kernel = GatherKernel(table.dtype, indices.dtype, math.prod(table.dims[:axis]), table.dims[axis],
                          math.prod(table.dims[axis + 1:]), indices.size)
    return _single(node, kernel.source(), elementwise_grid(node.outputs[0].size), [*node.inputs, Ref(node.id)])


def _gather_elements(ctx, node):
    x, indices = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    kernel = GatherElementsKernel(x.dtype, indices.dtype, x.dims, indices.dims, node.attrs["axis"])
    return _single(node, kernel.source(), elementwise_grid(indices.size), [*node.inputs, Ref(node.id)])


def _scatter_add(ctx, node):
    data, indices, _ = (ctx.shape(r) for r in node.inputs)
    axis = node.attrs["axis"]
    outer, inner = math.prod(data.dims[:axis]), math.prod(data.dims[axis + 1:])
    kernel = ScatterAddKernel(data.dtype, indices.dtype, outer, data.dims[axis], inner, indices.size)
    out = Ref(node.id)
    step = Step(node.label, tuple(node.inputs), (out,))
    if data.nbytes:
        step.actions.append(Copy(Buf(out), Buf(node.inputs[0]), data.nbytes))
    grid, block = elementwise_grid(outer * inner)
    if grid and indices.size:
        step.actions.append(Launch(kernel.source(), grid, block,
                                   (Buf(node.inputs[2]), Buf(node.inputs[1]), Buf(out))))
    return step


# --- reductions and rows ------------------------------------------------------------------
def _reduce(ctx, node):
    x = ctx.shape(node.inputs[0])
    kernel = ReduceKernel(node.kind, x.dtype, x.dims, tuple(node.attrs["axes"]))
    return _row_kernel_step(node, kernel, kernel.n_out, kernel.n_red, kernel.block_per_output)


def _argreduce(ctx, node):
    x = ctx.shape(node.inputs[0])
    kernel = ArgReduceKernel(node.kind, x.dtype, x.dims, node.attrs["axis"])
    return _row_kernel_step(node, kernel, kernel.n_out, kernel.n_red, kernel.block_per_output)


def _row_kernel_step(node, kernel, n_out: int, n_red: int, block_per_output: bool) -> Step:
    refs = [node.inputs[0], Ref(node.id)]
    if block_per_output:
        block = row_block(n_red)
        return _single(node, kernel.source(block), (row_grid(n_out), block), refs)
    grid, block = elementwise_grid(n_out)
    return _single(node, kernel.source(block), (grid, block), refs)


def _softmax(ctx, node):
    x = ctx.shape(node.inputs[0])
    axis = node.attrs["axis"]
    kernel = SoftmaxKernel(node.kind == "log_softmax", x.dtype, math.prod(x.dims[:axis]), x.dims[axis],
                           math.prod(x.dims[axis + 1:]))
    block = row_block(kernel.n)
    grid = row_grid(kernel.rows) if x.size else 0
    return _single(node, kernel.source(block), (grid, block), [node.inputs[0], Ref(node.id)])


def _norm(ctx, node):
    x = ctx.shape(node.inputs[0])
    eps = node.attrs["eps"]
    if node.kind == "group_norm":
        groups = node.attrs["num_groups"]
        spatial = math.prod(x.dims[2:])
        rows, n = x.dims[0] * groups, x.size // max(x.dims[0] * groups, 1)
        kernel = NormKernel("group_norm", x.dtype, rows, n, eps, True, groups, x.dims[1] // groups, spatial)
    else:
        axis = node.attrs["axis"]
        rows, n = math.prod(x.dims[:axis]), math.prod(x.dims[axis:])
        kernel = NormKernel(node.kind, x.dtype, rows, n, eps, len(node.inputs) > 2)
    block = row_block(kernel.n)
    gamma = node.inputs[1]
    beta = node.inputs[2] if len(node.inputs) > 2 else gamma  # unused without beta
    step = Step(node.label, tuple(node.inputs), (Ref(node.id),))
    if x.size:
        step.actions.append(Launch(kernel.source(block), row_grid(kernel.rows), block,
                                   (Buf(node.inputs[0]), Buf(gamma), Buf(beta), Buf(Ref(node.id)))))
    return step


def _rope(ctx, node):
    x = ctx.shape(node.inputs[0])
    kernel = RopeKernel(x.dtype, x.dims, node.attrs["n_rot"], node.attrs["style"])
    return _single(node, kernel.source(), elementwise_grid(x.size), [*node.inputs, Ref(node.id)])


def _pool2d(ctx, node):
    x, out = ctx.shape(node.inputs[0]), node.outputs[0]
    a = node.attrs
    kernel = Pool2dKernel(x.dtype, a["mode"], x.dims, out.dims[2:], tuple(a["kernel"]), tuple(a["strides"]),
                          tuple(a["pads"]), tuple(a["dilations"]), a["count_include_pad"])
    return _single(node, kernel.source(), elementwise_grid(out.size), [node.inputs[0], Ref(node.id)])


# --- GEMMs: matmul, conv, attention --------------------------------------------------------
def gemm(a: Buf, b: Buf, c: Buf, m: int, n: int, k: int, offsets: list[tuple[int, int, int]],
         trans_a: bool, trans_b: bool, types: tuple[DType, DType, DType], compute: int) -> list[Gemm]:
    """Row-major ``C[m, n] = op(A)[m, k] @ op(B)[k, n]`` for each (a, b, c) element offset
    triple, as cuBLAS column-major calls (``C^T = op(B)^T op(A)^T``): one strided batched
    call when the offsets form arithmetic progressions, else one call per triple."""
    ta, tb, tc = types
    scalar = np.dtype(np.complex128 if compute == COMPUTE_64F and tc.is_complex else
                      np.complex64 if tc.is_complex else np.float64 if compute == COMPUTE_64F else np.float32)
    lead = dict(transa=int(trans_b), transb=int(trans_a), m=n, n=m, k=k,
                lda=k if trans_b else n, ldb=m if trans_a else k, ldc=n,
                data_types=(CUDA_R[tb], CUDA_R[ta], CUDA_R[tc]), compute=compute, scalar=scalar)

    def call(off, strides, count):
        return Gemm(a=Buf(b.ref, b.offset + off[1] * tb.itemsize), b=Buf(a.ref, a.offset + off[0] * ta.itemsize),
                    c=Buf(c.ref, c.offset + off[2] * tc.itemsize), stride_a=strides[1], stride_b=strides[0],
                    stride_c=strides[2], batch=count, **lead)
    if len(offsets) == 1:
        return [call(offsets[0], (0, 0, 0), 1)]
    steps = [tuple(q - p for p, q in zip(offsets[i], offsets[i + 1])) for i in range(len(offsets) - 1)]
    if all(s == steps[0] for s in steps) and steps[0][2] > 0:
        return [call(offsets[0], steps[0], len(offsets))]
    return [call(off, (0, 0, 0), 1) for off in offsets]


def _float_compute(ctx: LowerContext, dtype: DType) -> int:
    if dtype.real is DType.F64:
        return COMPUTE_64F
    return COMPUTE_32F_FAST_TF32 if ctx.tf32 and dtype is DType.F32 else COMPUTE_32F


def _matmul(ctx, node):
    a, b = (ctx.shape(r) for r in node.inputs)
    a_dims = (1,) + a.dims if a.rank == 1 else a.dims
    b_dims = b.dims + (1,) if b.rank == 1 else b.dims
    m, k, n = a_dims[-2], a_dims[-1], b_dims[-1]
    out = Ref(node.id)
    step = Step(node.label, tuple(node.inputs), (out,))
    if node.outputs[0].size == 0:
        return step
    if k == 0:
        step.actions.append(Memset(Buf(out), node.outputs[0].nbytes))
        return step
    batch = node.outputs[0].dims[:len(node.outputs[0].dims) - (a.rank > 1) - (b.rank > 1)]
    if a.dtype.is_int:
        return _int_matmul(node, step, a_dims, b_dims, batch)
    offsets = []
    a_b = broadcast_access(a.dtype, a_dims[:-2], batch).strides
    b_b = broadcast_access(b.dtype, b_dims[:-2], batch).strides
    for i, coord in enumerate(itertools.product(*(range(d) for d in batch))):
        offsets.append((sum(c * s for c, s in zip(coord, a_b)) * m * k,
                        sum(c * s for c, s in zip(coord, b_b)) * k * n, i * m * n))
    step.actions += gemm(Buf(node.inputs[0]), Buf(node.inputs[1]), Buf(out), m, n, k, offsets or [(0, 0, 0)],
                         False, False, (a.dtype, b.dtype, a.dtype), _float_compute(ctx, a.dtype))
    return step


def _int_matmul(node, step, a_dims, b_dims, batch):
    """Integer matmul (no cuBLAS path wraps exactly): one thread per output element,
    64-bit unsigned accumulation, truncated to the dtype."""
    dt = node.outputs[0].dtype
    st = device_type(dt).store
    m, k, n = a_dims[-2], a_dims[-1], b_dims[-1]
    dims = batch + (m, n)
    a_st = broadcast_access(dt, a_dims[:-2], batch).strides
    b_st = broadcast_access(dt, b_dims[:-2], batch).strides
    total = math.prod(dims)
    lines = ["  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; "
             f"i < {total}ull; i += (unsigned long long)gridDim.x * blockDim.x) {{",
             "    unsigned long long rem = i;",
             f"    const long long col = rem % {n}ull; rem /= {n}ull;",
             f"    const long long row = rem % {m}ull; rem /= {m}ull;",
             "    long long ao = 0, bo = 0;"]
    for d in range(len(batch) - 1, -1, -1):
        lines.append(f"    {{ const long long c = rem % {batch[d]}ull; rem /= {batch[d]}ull; "
                     f"ao += c * {a_st[d] * m * k}; bo += c * {b_st[d] * k * n}; }}")
    lines += ["    unsigned long long acc = 0;",
              f"    for (long long t = 0; t < {k}; ++t) acc += (unsigned long long)(long long)a[ao + row * {k} + t]"
              f" * (unsigned long long)(long long)b[bo + t * {n} + col];",
              f"    out[i] = ({st})acc;", "  }"]
    from .kernels.preamble import KERNEL_NAME, PREAMBLE
    source = (PREAMBLE + f'extern "C" __global__ void {KERNEL_NAME}(const {st}* a, const {st}* b, {st}* out) {{\n'
              + "\n".join(lines) + "\n}\n")
    grid, block = elementwise_grid(total)
    step.actions.append(Launch(source, grid, block, (Buf(node.inputs[0]), Buf(node.inputs[1]), Buf(Ref(node.id)))))
    return step


def _bias_add(step: Step, out_ref: Ref, bias_ref: Ref, dtype: DType, dims) -> None:
    """``out += bias`` along axis 1 of ``out`` (channels), in place."""
    view = (dims[0], dims[1], math.prod(dims[2:]))
    acc_out = broadcast_access(dtype, view, view)
    kernel = FusedKernel(view, [acc_out, broadcast_access(dtype, (1, dims[1], 1), view)],
                         [FusedOp("add", (0, 1), dtype)], [(2, acc_out)])
    _launch_elementwise(step, kernel, [Buf(out_ref), Buf(bias_ref), Buf(out_ref)])


def _conv(ctx, node):
    x, w = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    out = node.outputs[0]
    a = node.attrs
    two_d = x.rank == 4
    hw = x.dims[2:] if two_d else (1,) + x.dims[2:]
    khw = w.dims[2:] if two_d else (1,) + w.dims[2:]
    ohw = out.dims[2:] if two_d else (1,) + out.dims[2:]
    strides = tuple(a["strides"]) if two_d else (1,) + tuple(a["strides"])
    dil = tuple(a["dilations"]) if two_d else (1,) + tuple(a["dilations"])
    pads = tuple(a["pads"][:2]) if two_d else (0, a["pads"][0])
    n, c = x.dims[:2]
    co, groups = w.dims[0], a["groups"]
    kk, p = khw[0] * khw[1], ohw[0] * ohw[1]
    cpg, cog = c // groups, co // groups
    cols_bytes = n * c * kk * p * x.dtype.itemsize
    step = Step(node.label, tuple(node.inputs), (Ref(node.id),), scratch=_align(cols_bytes))
    if out.size == 0:
        return step
    im2col = Im2colKernel(x.dtype, (n, c) + tuple(hw), tuple(ohw), tuple(khw), strides, pads, dil)
    grid, block = elementwise_grid(n * c * kk * p)
    if grid:
        step.actions.append(Launch(im2col.source(), grid, block, (Buf(node.inputs[0]), Buf(None))))
    for g in range(groups):
        offsets = [(g * cog * cpg * kk, i * c * kk * p + g * cpg * kk * p, i * co * p + g * cog * p) for i in range(n)]
        if cpg * kk == 0:
            continue
        step.actions += gemm(Buf(node.inputs[1]), Buf(None), Buf(Ref(node.id)), cog, p, cpg * kk,
                             offsets, False, False, (x.dtype, x.dtype, x.dtype),
                             _float_compute(ctx, x.dtype))
    if len(node.inputs) > 2:
        _bias_add(step, Ref(node.id), node.inputs[2], x.dtype, out.dims)
    return step


def _conv_transpose2d(ctx, node):
    x, w = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    out = node.outputs[0]
    a = node.attrs
    n, ci, h, wd = x.dims
    groups = a["groups"]
    cig, cog = ci // groups, w.dims[1]
    co = cog * groups
    kk = w.dims[2] * w.dims[3]
    acc_dt = DType.F64 if x.dtype is DType.F64 else DType.F32
    cols_bytes = n * co * kk * h * wd * acc_dt.itemsize
    step = Step(node.label, tuple(node.inputs), (Ref(node.id),), scratch=_align(cols_bytes))
    if out.size == 0:
        return step
    if cig and h * wd:
        for g in range(groups):
            offsets = [(g * cig * cog * kk, i * ci * h * wd + g * cig * h * wd, i * co * kk * h * wd + g * cog * kk * h * wd)
                       for i in range(n)]
            step.actions += gemm(Buf(node.inputs[1]), Buf(node.inputs[0]), Buf(None), cog * kk, h * wd, cig, offsets,
                                 True, False, (x.dtype, x.dtype, acc_dt), _float_compute(ctx, x.dtype))
    else:
        step.actions.append(Memset(Buf(None), cols_bytes))
    kernel = Col2imKernel(x.dtype, n, groups, cog, (h, wd), out.dims[2:], tuple(w.dims[2:]), tuple(a["strides"]),
                          tuple(a["pads"][:2]), tuple(a["dilations"]), len(node.inputs) > 2)
    bias = node.inputs[2] if len(node.inputs) > 2 else node.inputs[0]
    grid, block = elementwise_grid(out.size)
    step.actions.append(Launch(kernel.source(), grid, block, (Buf(None), Buf(bias), Buf(Ref(node.id)))))
    return step


def _attention(ctx, node):
    """Scores by cuBLAS into scratch, masked softmax kernel, probabilities @ V by cuBLAS.
    Query rows are processed in chunks so that the scores of one launch stay within
    ``ctx.attention_scores_bytes``: long sequences never materialize the full matrix."""
    q, k, v = (ctx.shape(r) for r in node.inputs[:3])
    a = node.attrs
    b, hq, sq, d = q.dims
    hkv, sk, dv = k.dims[1], k.dims[2], v.dims[3]
    group = hq // hkv
    out = Ref(node.id)
    step = Step(node.label, tuple(node.inputs), (out,))
    if node.outputs[0].size == 0:
        return step
    if sk == 0:
        step.actions.append(Memset(Buf(out), node.outputs[0].nbytes))
        return step
    score_dt = DType.F64 if q.dtype is DType.F64 else DType.F32
    per_row = b * hkv * sk
    chunk = max(1, min(sq, ctx.attention_scores_bytes // max(per_row * score_dt.itemsize, 1)))
    probs_at = _align(per_row * chunk * score_dt.itemsize)
    step.scratch = probs_at + _align(per_row * chunk * q.dtype.itemsize)
    mask_strides = None
    if a["mask"] in ("custom", "bias"):
        m = ctx.shape(node.inputs[3])
        mask_strides = broadcast_access(m.dtype, m.dims, (b, hq, sq, sk)).strides
    mask_buf = Buf(node.inputs[3]) if len(node.inputs) > 3 else Buf(None)
    compute = _float_compute(ctx, q.dtype)
    for g in range(group):
        for q0 in range(0, sq, chunk):
            rows = min(chunk, sq - q0)
            if d:
                offsets = [(bk * group * sq * d + (g * sq + q0) * d, bk * sk * d, bk * rows * sk)
                           for bk in range(b * hkv)]
                step.actions += gemm(Buf(node.inputs[0]), Buf(node.inputs[1]), Buf(None), rows, sk, d, offsets,
                                     False, True, (q.dtype, k.dtype, score_dt), compute)
            else:
                step.actions.append(Memset(Buf(None), per_row * rows * score_dt.itemsize))
            kernel = AttentionSoftmaxKernel(q.dtype, b * hkv, rows, sq, sk, hkv, group, a["scale"], a["softcap"],
                                            a["mask"], a["window"], mask_strides)
            block = row_block(sk)
            step.actions.append(Launch(kernel.source(block), row_grid(kernel.rows), block,
                                       (Buf(None), mask_buf, Buf(None, probs_at), np.int64(g), np.int64(q0))))
            offsets = [(bk * rows * sk, bk * sk * dv, bk * group * sq * dv + (g * sq + q0) * dv)
                       for bk in range(b * hkv)]
            step.actions += gemm(Buf(None, probs_at), Buf(node.inputs[2]), Buf(out), rows, dv, sk, offsets,
                                 False, False, (q.dtype, v.dtype, q.dtype), compute)
    return step


def _align(nbytes: int) -> int:
    return -(-nbytes // SCRATCH_ALIGN) * SCRATCH_ALIGN


# --- random numbers ---------------------------------------------------------------------------
def _rng(ctx, node):
    """Philox on the device; the seed (``combine_seed(options seed or node seed, key)``)
    is the launch's last argument, filled in by the executable at run time. The ``ort``
    mode (a sequential C++ engine) is computed on the host and uploaded."""
    out = node.outputs[0]
    step = Step(node.label, (), (Ref(node.id),))
    if ctx.rng_mode != "philox":
        step.actions.append(Host(node))
        return step
    dist = "uniform" if node.kind == "rng_uniform" else "normal"
    a, b = (node.attrs["low"], node.attrs["high"]) if dist == "uniform" else (node.attrs["mean"], node.attrs["scale"])
    kernel = PhiloxKernel(dist, out.dtype, out.size, a, b)
    grid, block = elementwise_grid(kernel.threads)
    if grid:
        step.actions.append(Launch(kernel.source(), grid, block, (Buf(Ref(node.id)), RngSeed(node))))
    return step


@dataclass(frozen=True)
class RngSeed:
    """Placeholder argument: the executable passes the node's Philox stream seed."""

    node: Node


def _host(ctx, node):
    return Step(node.label, tuple(node.inputs), tuple(Ref(node.id, i) for i in range(len(node.outputs))),
                [Host(node)])


LOWERINGS: dict[str, Callable[[LowerContext, Node], Step]] = {
    "transpose": _transpose, "slice": _slice, "expand": _expand, "frame": _frame, "concat": _concat,
    "split": _split, "pad": _pad, "gather": _gather, "gather_elements": _gather_elements,
    "scatter_add": _scatter_add, "argmax": _argreduce, "argmin": _argreduce, "softmax": _softmax,
    "log_softmax": _softmax, "layer_norm": _norm, "rms_norm": _norm, "group_norm": _norm, "rope": _rope,
    "pool2d": _pool2d, "matmul": _matmul, "conv": _conv, "conv_transpose2d": _conv_transpose2d,
    "attention": _attention, "rng_uniform": _rng, "rng_normal": _rng,
    **{k: _reduce for k in ("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min")},
    **{k: _host for k in HOST_KINDS},
}

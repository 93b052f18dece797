"""Kernels that combine many elements into one: reductions (sum, prod, mean, max, min,
argmax, argmin), softmax / log_softmax, layer / rms / group norm, and the masked
softmax of attention scores.

Accumulators: f32 for f16/bf16/f32, f64 for f64, complex in their own precision,
integers in 64-bit unsigned arithmetic (so sums and products wrap exactly as the
dtype's would: the final truncation is the same modulo 2**bits). Row kernels use one
block per row and a shared-memory tree (``BLOCK_REDUCE``); ``block`` must be a power
of two, which :func:`rlx_cuda.launch.row_block` guarantees.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from rlx_core.ir import DType

from ..dtypes import device_type, index_ctype
from .elementwise import coalesce, contiguous_strides
from .preamble import BLOCK_REDUCE, KERNEL_NAME, PREAMBLE

__all__ = ["ReduceKernel", "ArgReduceKernel", "SoftmaxKernel", "NormKernel", "AttentionSoftmaxKernel",
           "accumulator", "THREAD_PER_OUTPUT_MAX"]

# Reductions of at most this many elements per output run one thread per output.
THREAD_PER_OUTPUT_MAX = 64

_INT_LIMITS = {DType.I8: (-128, 127), DType.I16: (-32768, 32767), DType.I32: (-2**31, 2**31 - 1),
               DType.I64: (-2**63, 2**63 - 1), DType.U8: (0, 255), DType.U32: (0, 2**32 - 1)}


def accumulator(dtype: DType) -> str:
    """The C type a sum or product of ``dtype`` accumulates in."""
    if dtype.is_int:
        return "unsigned long long"
    return device_type(dtype).compute  # float (also for f16/bf16), double, complex


def _int_literal(v: int) -> str:
    if v == -2**63:
        return "(-9223372036854775807LL - 1)"
    return f"{v}LL" if v < 0 else f"{v}ULL"


def _split_axes(dims: Sequence[int], axes: Sequence[int]):
    """(kept dims, kept strides, reduced dims, reduced strides) of a contiguous tensor,
    each coalesced, with the kept part in output (row-major) order."""
    strides = contiguous_strides(dims)
    kept = [d for d in range(len(dims)) if d not in axes]
    kd, (ks,) = coalesce([dims[d] for d in kept], [[strides[d] for d in kept]])
    rd, (rs,) = coalesce([dims[d] for d in axes], [[strides[d] for d in axes]])
    return kd, ks, rd, rs


def _decompose(var: str, dims: Sequence[int], strides: Sequence[int], idx: str, off: str, name: str) -> list[str]:
    """C lines computing ``name`` = the element offset of flat index ``var`` over ``dims``."""
    if not dims:
        return [f"    const {off} {name} = 0;"]
    lines = [f"    {idx} {name}_r = {var};", f"    {off} {name} = 0;"]
    for d in range(len(dims) - 1, 0, -1):
        lines.append(f"    {name} += ({off})({name}_r % {dims[d]}u) * {strides[d]}; {name}_r /= {dims[d]}u;")
    lines.append(f"    {name} += ({off}){name}_r * {strides[0]};")
    return lines


@dataclass(frozen=True)
class _Reduction:
    """What a reduce kind does in C: identity, combine, lift of a loaded value, final map."""

    acc: str
    identity: str
    combine: str  # body of rlx_combine over a, b
    lift: str     # C expression of the loaded value ``x`` as an accumulator
    final: str    # C expression of ``acc`` (and ``count``) as the output's compute value


def _reduction(kind: str, dtype: DType) -> _Reduction:
    ct = device_type(dtype).compute
    acc = accumulator(dtype)
    if kind in ("reduce_sum", "reduce_mean", "reduce_prod"):
        add = kind != "reduce_prod"
        if dtype.is_complex:
            part = device_type(dtype.real).compute
            ident = f"rlx_cplx(({part}){0 if add else 1}, ({part})0)"
            final = ("rlx_cplx(acc.re / (" + part + ")count, acc.im / (" + part + ")count)") \
                if kind == "reduce_mean" else "acc"
            return _Reduction(acc, ident, f"return {'rlx_add' if add else 'rlx_mul'}(a, b);", "x", final)
        lift = "(unsigned long long)(long long)x" if dtype.is_int and dtype.is_signed else f"({acc})x"
        final = f"acc / ({acc})count" if kind == "reduce_mean" else f"({ct})acc"
        return _Reduction(acc, f"({acc}){0 if add else 1}", f"return a {'+' if add else '*'} b;", lift, final)
    largest = kind == "reduce_max"
    if dtype.is_bool:
        return _Reduction("bool", "false" if largest else "true", f"return a {'||' if largest else '&&'} b;",
                          "x", "acc")
    if dtype.is_int:
        lo, hi = _INT_LIMITS[dtype]
        ident = f"({ct}){_int_literal(lo if largest else hi)}"
    else:
        inf = "rlx_inf_d()" if dtype is DType.F64 else "rlx_inf_f()"
        ident = f"-{inf}" if largest else inf
    return _Reduction(ct, ident, f"return {'rlx_max' if largest else 'rlx_min'}(a, b);", "x", "acc")


@dataclass
class ReduceKernel:
    """``kind`` of ``dtype`` over sorted ``axes`` of a contiguous ``dims`` tensor; the
    output is contiguous over the kept dims (keepdims does not change the layout)."""

    kind: str
    dtype: DType
    dims: tuple[int, ...]
    axes: tuple[int, ...]

    @property
    def n_out(self) -> int:
        return math.prod(d for i, d in enumerate(self.dims) if i not in self.axes)

    @property
    def n_red(self) -> int:
        return math.prod(self.dims[a] for a in self.axes)

    @property
    def block_per_output(self) -> bool:
        return self.n_red > THREAD_PER_OUTPUT_MAX

    def source(self, block: int) -> str:
        red = _reduction(self.kind, self.dtype)
        dt = device_type(self.dtype)
        total = math.prod(self.dims)
        idx, off = ("unsigned int" if total < 2**31 else "unsigned long long"), index_ctype(total)
        kd, ks, rd, rs = _split_axes(self.dims, self.axes)
        head = [f"#define RLX_ACC {red.acc}", f"RLX_D RLX_ACC rlx_combine(RLX_ACC a, RLX_ACC b) {{ {red.combine} }}"]
        load = f"{dt.load_from('in[base + roff]')}"
        inner = _decompose("r", rd, rs, idx, off, "roff")
        final = red.final.replace("count", f"{self.n_red}")
        if self.kind == "reduce_mean" and self.n_red == 0:  # 0 / 0, written without dividing by a literal 0
            nan = f"rlx_nan(({device_type(self.dtype.real).compute})0)"
            final = f"rlx_cplx({nan}, {nan})" if self.dtype.is_complex else nan
        out_expr = dt.to_store(final)
        if self.block_per_output:
            body = [f"  __shared__ RLX_ACC sh[{block}];",
                    f"  for ({idx} o = blockIdx.x; o < {self.n_out}u; o += gridDim.x) {{",
                    *_decompose("o", kd, ks, idx, off, "base"),
                    f"    RLX_ACC acc = {red.identity};",
                    f"    for ({idx} r = threadIdx.x; r < {self.n_red}u; r += blockDim.x) {{",
                    *["  " + line for line in inner],
                    f"      const {dt.compute} x = {load};",
                    f"      acc = rlx_combine(acc, {red.lift});",
                    "    }",
                    "    acc = rlx_block_reduce(acc, sh);",
                    f"    if (threadIdx.x == 0) out[o] = {out_expr};",
                    "  }"]
            head.append(BLOCK_REDUCE)
        else:
            body = [f"  for ({idx} o = ({idx})blockIdx.x * blockDim.x + threadIdx.x; o < {self.n_out}u; "
                    f"o += ({idx})gridDim.x * blockDim.x) {{",
                    *_decompose("o", kd, ks, idx, off, "base"),
                    f"    RLX_ACC acc = {red.identity};",
                    f"    for ({idx} r = 0; r < {self.n_red}u; ++r) {{",
                    *["  " + line for line in inner],
                    f"      const {dt.compute} x = {load};",
                    f"      acc = rlx_combine(acc, {red.lift});",
                    "    }",
                    f"    out[o] = {out_expr};",
                    "  }"]
        return _kernel(head, f"const {dt.store}* in, {dt.store}* out", body)


@dataclass
class ArgReduceKernel:
    """argmax / argmin of ``dtype`` along ``axis`` of contiguous ``dims`` -> i64 indices.
    Ties keep the lowest index; a NaN beats every number (the first NaN wins)."""

    kind: str
    dtype: DType
    dims: tuple[int, ...]
    axis: int

    @property
    def n_out(self) -> int:
        return math.prod(self.dims) // self.dims[self.axis]

    @property
    def n_red(self) -> int:
        return self.dims[self.axis]

    @property
    def block_per_output(self) -> bool:
        return self.n_red > THREAD_PER_OUTPUT_MAX

    def source(self, block: int) -> str:
        dt = device_type(self.dtype)
        better = ">" if self.kind == "argmax" else "<"
        nan = "isnan(a.v) && isnan(b.v) ? (a.i < b.i ? a : b) : isnan(a.v) ? a : isnan(b.v) ? b : " \
            if self.dtype.is_float else ""
        head = [f"struct rlx_arg {{ {dt.compute} v; long long i; }};", "#define RLX_ACC rlx_arg",
                "RLX_D rlx_arg rlx_combine(rlx_arg a, rlx_arg b) {",
                "  if (a.i < 0) return b;", "  if (b.i < 0) return a;",
                f"  return {nan}(a.v {better} b.v) ? a : (b.v {better} a.v) ? b : (a.i < b.i ? a : b);", "}"]
        outer = math.prod(self.dims[:self.axis])
        inner = math.prod(self.dims[self.axis + 1:])
        total = math.prod(self.dims)
        idx, off = ("unsigned int" if total < 2**31 else "unsigned long long"), index_ctype(total)
        base = f"    const {off} base = ({off})(o / {inner}u) * {self.n_red * inner} + (o % {inner}u);"
        step = f"      rlx_arg x; x.v = {dt.load_from(f'in[base + ({off})r * {inner}]')}; x.i = (long long)r;"
        if self.block_per_output:
            body = [f"  __shared__ rlx_arg sh[{block}];",
                    f"  for ({idx} o = blockIdx.x; o < {outer * inner}u; o += gridDim.x) {{", base,
                    "    rlx_arg acc; acc.i = -1;",
                    f"    for ({idx} r = threadIdx.x; r < {self.n_red}u; r += blockDim.x) {{", step,
                    "      acc = rlx_combine(acc, x);", "    }",
                    "    acc = rlx_block_reduce(acc, sh);",
                    "    if (threadIdx.x == 0) out[o] = acc.i;", "  }"]
            head.append(BLOCK_REDUCE)
        else:
            body = [f"  for ({idx} o = ({idx})blockIdx.x * blockDim.x + threadIdx.x; o < {outer * inner}u; "
                    f"o += ({idx})gridDim.x * blockDim.x) {{", base,
                    "    rlx_arg acc; acc.i = -1;",
                    f"    for ({idx} r = 0; r < {self.n_red}u; ++r) {{", step,
                    "      acc = rlx_combine(acc, x);", "    }",
                    "    out[o] = acc.i;", "  }"]
        return _kernel(head, f"const {dt.store}* in, long long* out", body)


def _row_loop(rows: int, idx: str) -> str:
    return f"  for ({idx} row = blockIdx.x; row < {rows}u; row += gridDim.x) {{"


def _compute_float(dtype: DType) -> str:
    return "double" if dtype is DType.F64 else "float"


@dataclass
class SoftmaxKernel:
    """softmax / log_softmax along the middle axis of a contiguous ``[outer, n, inner]``:
    one block per (outer, inner) row; passes: max (NaN-propagating), sum of exp, write."""

    log: bool
    dtype: DType
    outer: int
    n: int
    inner: int

    @property
    def rows(self) -> int:
        return self.outer * self.inner

    def source(self, block: int) -> str:
        dt = device_type(self.dtype)
        acc = _compute_float(self.dtype)
        total = self.outer * self.n * self.inner
        idx, off = ("unsigned int" if total < 2**31 else "unsigned long long"), index_ctype(total)
        inf = "rlx_inf_d()" if acc == "double" else "rlx_inf_f()"
        x = f"(({acc}){dt.load_from('in[base + (' + off + ')j * ' + str(self.inner) + ']')})"
        write = "x - m - rlx_log(s)" if self.log else "rlx_exp(x - m) / s"
        head = [f"#define RLX_ACC {acc}", "RLX_D RLX_ACC rlx_combine(RLX_ACC a, RLX_ACC b) { return a + b; }",
                BLOCK_REDUCE,
                "RLX_D RLX_ACC rlx_block_max(RLX_ACC v, RLX_ACC* sh) {", "  sh[threadIdx.x] = v; __syncthreads();",
                "  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {",
                "    if (threadIdx.x < s) sh[threadIdx.x] = rlx_max(sh[threadIdx.x], sh[threadIdx.x + s]);",
                "    __syncthreads();", "  }", "  RLX_ACC r = sh[0]; __syncthreads(); return r;", "}"]
        body = [f"  __shared__ {acc} sh[{block}];", _row_loop(self.rows, idx),
                f"    const {off} base = ({off})(row / {self.inner}u) * {self.n * self.inner} + (row % {self.inner}u);",
                f"    {acc} m = -{inf};",
                f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) m = rlx_max(m, {x});",
                "    m = rlx_block_max(m, sh);",
                f"    {acc} s = 0;",
                f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) s += rlx_exp({x} - m);",
                "    s = rlx_block_reduce(s, sh);",
                f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) {{",
                f"      const {acc} x = {x};",
                f"      out[base + ({off})j * {self.inner}] = {dt.to_store(write)};",
                "    }", "  }"]
        return _kernel(head, f"const {dt.store}* in, {dt.store}* out", body)


@dataclass
class NormKernel:
    """layer_norm / rms_norm / group_norm over contiguous rows of ``n`` elements.

    Row ``row`` element ``j`` is scaled by ``gamma[(row % groups) * per_group + j / spatial]``
    (and shifted by beta at the same index): for layer/rms norm ``groups=1, spatial=1``
    so the index is ``j``; group_norm views ``[N, C, *S]`` as rows ``[N*G, C/G*S]``.
    Mean and variance are two passes (centered), as the reference computes them."""

    kind: str
    dtype: DType
    rows: int
    n: int
    eps: float
    has_beta: bool
    groups: int = 1
    per_group: int = 0
    spatial: int = 1

    def source(self, block: int) -> str:
        dt = device_type(self.dtype)
        acc = _compute_float(self.dtype)
        total = self.rows * self.n
        idx, off = ("unsigned int" if total < 2**31 else "unsigned long long"), index_ctype(total)
        x = f"(({acc}){dt.load_from('in[base + j]')})"
        g = f"{self.groups if self.groups > 1 else 1}"
        pidx = f"(row % {g}u) * {self.per_group}u + j / {self.spatial}u"
        beta = f" + ({acc}){dt.load_from('beta[' + pidx + ']')}" if self.has_beta else ""
        eps = repr(float(self.eps))
        lines = [f"  __shared__ {acc} sh[{block}];", _row_loop(self.rows, idx),
                 f"    const {off} base = ({off})row * {self.n};"]
        if self.kind == "rms_norm":
            lines += [f"    {acc} ss = 0;",
                      f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) {{ const {acc} v = {x}; ss += v * v; }}",
                      f"    const {acc} mean = 0;",
                      f"    const {acc} inv = ({acc})1 / rlx_sqrt(rlx_block_reduce(ss, sh) / ({acc}){self.n} + ({acc}){eps});"]
        else:
            lines += [f"    {acc} s = 0;",
                      f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) s += {x};",
                      f"    const {acc} mean = rlx_block_reduce(s, sh) / ({acc}){self.n};",
                      f"    {acc} ss = 0;",
                      f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) {{ const {acc} c = {x} - mean; ss += c * c; }}",
                      f"    const {acc} inv = ({acc})1 / rlx_sqrt(rlx_block_reduce(ss, sh) / ({acc}){self.n} + ({acc}){eps});"]
        lines += [f"    for ({idx} j = threadIdx.x; j < {self.n}u; j += blockDim.x) {{",
                  f"      const {acc} y = ({x} - mean) * inv * ({acc}){dt.load_from('gamma[' + pidx + ']')}{beta};",
                  f"      out[base + j] = {dt.to_store('y')};", "    }", "  }"]
        params = f"const {dt.store}* in, const {dt.store}* gamma, const {dt.store}* beta, {dt.store}* out"
        head = [f"#define RLX_ACC {acc}", "RLX_D RLX_ACC rlx_combine(RLX_ACC a, RLX_ACC b) { return a + b; }",
                BLOCK_REDUCE]
        return _kernel(head, params, lines)


@dataclass
class AttentionSoftmaxKernel:
    """The masked softmax between attention's two GEMMs.

    ``scores`` holds raw ``q . k`` for ``batch = B * Hkv`` slices of ``chunk`` query rows
    by ``sk`` keys; one launch covers query rows ``q0 .. q0 + chunk`` of head ``kvh *
    group + g`` in every slice (``g`` and ``q0`` are kernel arguments, so one compiled
    kernel serves every launch). Per row: scale, softcap, mask, then softmax written as
    probabilities ``p`` in the input dtype (all zeros for a row without a visible key).
    ``mask_strides`` are the broadcast strides of a custom / bias mask over
    ``[B, Hq, Sq, Sk]``."""

    dtype: DType
    batch: int
    chunk: int
    sq: int
    sk: int
    hkv: int
    group: int
    scale: float
    softcap: float | None
    mask: str
    window: int | None = None
    mask_strides: tuple[int, int, int, int] | None = None

    @property
    def rows(self) -> int:
        return self.batch * self.chunk

    def source(self, block: int) -> str:
        dt = device_type(self.dtype)
        acc = _compute_float(self.dtype)
        inf = "rlx_inf_d()" if acc == "double" else "rlx_inf_f()"
        total = self.batch * self.chunk * self.sk
        idx, off = ("unsigned int" if total < 2**31 else "unsigned long long"), index_ctype(total)
        score = [f"      {acc} s = scores[base + j] * ({acc}){float(self.scale)!r};"]
        if self.softcap is not None:
            c = f"({acc}){float(self.softcap)!r}"
            score.append(f"      s = {c} * rlx_tanh(s / {c});")
        moff = None
        if self.mask in ("custom", "bias"):
            sb, sh, sq, sk = self.mask_strides
            moff = f"({off})b * {sb} + ({off})h * {sh} + ({off})i * {sq} + ({off})j * {sk}"
        if self.mask == "bias":
            score.append(f"      s += ({acc}){dt.load_from('mask[' + moff + ']')};")
        elif self.mask == "custom":
            score.append(f"      if (!mask[{moff}]) s = -{inf};")
        elif self.mask in ("causal", "sliding"):
            visible = "j <= p" + (f" && j > p - {self.window}" if self.mask == "sliding" else "")
            score.append(f"      if (!({visible})) s = -{inf};")
        mask_t = "unsigned char" if self.mask == "custom" else dt.store
        head = [f"#define RLX_ACC {acc}", "RLX_D RLX_ACC rlx_combine(RLX_ACC a, RLX_ACC b) { return a + b; }",
                BLOCK_REDUCE,
                "RLX_D RLX_ACC rlx_block_max(RLX_ACC v, RLX_ACC* sh) {", "  sh[threadIdx.x] = v; __syncthreads();",
                "  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {",
                "    if (threadIdx.x < s) sh[threadIdx.x] = rlx_max(sh[threadIdx.x], sh[threadIdx.x + s]);",
                "    __syncthreads();", "  }", "  RLX_ACC r = sh[0]; __syncthreads(); return r;", "}"]
        loop = f"    for ({idx} j = threadIdx.x; j < {self.sk}u; j += blockDim.x) {{"
        body = [f"  __shared__ {acc} sh[{block}];", _row_loop(self.rows, idx),
                f"    const {off} base = ({off})row * {self.sk};",
                f"    const long long bk = row / {self.chunk}u, m_row = row % {self.chunk}u;",
                f"    const long long b = bk / {self.hkv}, h = (bk % {self.hkv}) * {self.group} + g;",
                "    const long long i = q0 + m_row;",
                f"    const long long p = i + {self.sk - self.sq};",
                "    (void)b; (void)h; (void)p;",
                f"    {acc} mx = -{inf};", loop, *score, "      mx = rlx_max(mx, s);", "    }",
                "    mx = rlx_block_max(mx, sh);",
                f"    {acc} sum = 0;", loop, *score, "      sum += rlx_exp(s - mx);", "    }",
                "    sum = rlx_block_reduce(sum, sh);",
                f"    const bool empty = (mx == -{inf});",
                loop, *score, f"      const {acc} w = empty ? ({acc})0 : rlx_exp(s - mx) / sum;",
                f"      probs[base + j] = {dt.to_store('w')};", "    }", "  }"]
        params = (f"const {acc}* scores, const {mask_t}* mask, {dt.store}* probs, long long g, long long q0")
        return _kernel(head, params, body)


def _kernel(head: list[str], params: str, body: list[str]) -> str:
    return (PREAMBLE + "\n".join(head) + f'\nextern "C" __global__ void {KERNEL_NAME}({params}) {{\n'
            + "\n".join(body) + "\n}\n")

"""Matrix products and dense solves.

``matmul`` on real dtypes is a tiled GEMM: a work-group computes a ``TM x TN`` tile of C,
walking K in steps of ``TK`` through local memory; each work-item holds a ``WM x WN``
block of accumulators (rows ``ty + i*LY``, columns ``tx + j*LX``: coalesced stores and
conflict-free local reads) and multiplies with ``fma``. Tiles fully inside the matrices
load with ``vload4`` where the rows allow it; edge tiles check bounds. Batches (numpy
broadcasting of the leading dims) are the third NDRange dimension. The tile comes from
``CompileOptions(backend={"gemm_tile": "64x64x16/4x4"})``, else from the device's
calibration (``rlx_rocm.calibrate``), else from the product's size.

Integers accumulate in their unsigned type (so products wrap exactly), 16-bit floats in
f32 (rounded once), complex products run one work-item per output element.
``dense_solve`` is Gaussian elimination with partial pivoting (LAPACK's ``gesv``
algorithm), one work-item per system, on a copy of A and b in scratch memory.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from rlx_core.errors import RlxError
from rlx_core.ir import DType, Ref

from .base import KernelContext, groups, idx_type, linear_loop, strides_of, unravel
from .elementwise import broadcast_index
from .types import UNSIGNED, ctype, is_complex, load, literal, store

__all__ = ["GENERATORS", "Tile", "parse_tile", "TILES", "gemm", "tile_for"]

_CPREFIX = {DType.C64: "c64", DType.C128: "c128"}


@dataclass(frozen=True)
class Tile:
    tm: int
    tn: int
    tk: int
    wm: int
    wn: int
    db: bool = False  # double-buffered: the next K-tile is fetched into registers while this one computes
    vl: bool = False  # /v: double-buffered, f32 local tiles read as float4 (each work-item's rows and
    #                   columns in groups of 4, a group's 4 elements adjacent: one 16-byte local read per 4)

    @property
    def lx(self) -> int:
        return self.tn // self.wn

    @property
    def ly(self) -> int:
        return self.tm // self.wm

    def __str__(self) -> str:
        return f"{self.tm}x{self.tn}x{self.tk}/{self.wm}x{self.wn}" + ("/v" if self.vl else "/db" if self.db else "")


def parse_tile(text: str) -> Tile:
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)/(\d+)x(\d+)(/db|/v)?", str(text).strip())
    if not m:
        raise RlxError(f"rocm backend option gemm_tile must look like '64x64x16/4x4' (TMxTNxTK/WMxWN, "
                       f"'/db' appended for the double-buffered kernel, '/v' for the double-buffered one with "
                       f"float4 local reads), got {text!r}")
    t = Tile(*(int(g) for g in m.groups()[:5]), db=bool(m.group(6)), vl=m.group(6) == "/v")
    if t.tm % t.wm or t.tn % t.wn or min(t.tm, t.tn, t.tk, t.wm, t.wn) < 1:
        raise RlxError(f"rocm gemm_tile {text!r}: TM must be a multiple of WM and TN of WN")
    if t.vl and (t.wm % 4 or t.wn % 4 or t.tk % 4):
        raise RlxError(f"rocm gemm_tile {text!r}: '/v' needs WM, WN and TK multiples of 4")
    return t


TILES = [parse_tile(t) for t in ("128x128x16/8x8", "128x128x8/8x8", "128x64x16/8x4", "64x64x16/4x4",
                                 "64x64x8/4x4", "32x32x16/2x2", "32x32x8/4x4", "16x16x16/1x1",
                                 "128x128x16/8x8/db", "128x128x8/8x8/db", "128x64x16/8x4/db", "64x64x16/4x4/db",
                                 "64x64x8/4x4/db", "128x128x16/8x8/v", "128x128x8/8x8/v", "128x64x16/8x4/v",
                                 "64x64x16/4x4/v", "64x128x16/4x8/v")]
SMALL = parse_tile("16x16x16/2x2")


def tile_for(k: KernelContext, m: int, n: int, kk: int, itemsize: int) -> Tile:
    """The tile of a product of ``m x kk`` by ``kk x n``: the option, else the calibrated
    tile when the product is large enough to fill it, else a small one."""
    given = k.options.get("gemm_tile")
    if given is not None:
        tile = parse_tile(given)
    else:
        tuned = k.dev.tuning.get("gemm_tile")
        tile = parse_tile(tuned) if tuned else (TILES[3] if not k.dev.software else TILES[6])
        if m < tile.tm or n < tile.tn:
            tile = SMALL
    while (tile.lx * tile.ly > k.dev.max_work_group or
           (2 if tile.db else 1) * tile.tk * (tile.tm + tile.tn + 8) * itemsize > k.dev.local_mem) and tile != SMALL:
        tile = SMALL
    return tile


def gemm(k: KernelContext, a, b, c, dt: DType, m: int, n: int, kk: int, batch: int,
         a_off: str = "0", b_off: str = "0", c_off: str = "0", bias=None, bias_off: str = "0",
         tile: Tile | None = None, lda: int | None = None, ldb: int | None = None,
         a_dt: DType | None = None, b_dt: DType | None = None, aligned: bool = False) -> None:
    """C[batch] = A[batch] @ B[batch] (+ bias per row of C), all row-major.

    ``a``, ``b``, ``c``, ``bias``: arena slots. ``*_off``: C expressions of ``batch`` (the
    batch index) giving each operand's element offset. ``aligned``: the caller promises
    that ``a_off`` and ``b_off`` are multiples of 4 whenever ``lda`` (``ldb``) is, so the
    /v kernel may read full tiles as aligned float4."""
    if m == 0 or n == 0 or batch == 0:
        return
    lda = kk if lda is None else lda
    ldb = n if ldb is None else ldb
    wraps = dt.is_int
    acc = ("ulong" if dt.itemsize == 8 else "uint") if wraps else ctype(dt)
    t = tile or tile_for(k, m, n, kk, 8 if acc in ("double", "ulong") else 4)
    lx, ly = t.lx, t.ly
    nt = lx * ly
    idx = idx_type(batch * max(m * kk, kk * n, m * n) + 1)
    a_dt, b_dt = a_dt or dt, b_dt or dt
    params = [(k.buf("A", a_dt, True), a), (k.buf("B", b_dt, True), b)]
    if bias is not None:
        params.append((k.buf("bias", dt, True), bias))
    params.append((k.buf("C", dt), c))

    def ld(ptr, at):
        v = load(a_dt if ptr == "a" else b_dt, ptr, at)
        return f"(({acc})({v}))" if wraps else v

    mul_add = "acc[i][j] += ar[i] * br[j];" if wraps else "acc[i][j] = fma(ar[i], br[j], acc[i][j]);"
    vec_a = a_dt is DType.F32 and acc == "float" and t.tk % 4 == 0 and lda % 4 == 0
    vec_b = b_dt is DType.F32 and acc == "float" and t.tn % 4 == 0 and ldb % 4 == 0
    load_a_fast = (f"      for (int e = tid; e < {t.tm * t.tk // 4}; e += {nt}) {{\n"
                   f"        const int r = e / {t.tk // 4}, q = (e % {t.tk // 4}) * 4;\n"
                   f"        const float4 v = vload4(0, a + (bm + r) * ({idx}){lda} + k0 + q);\n"
                   f"        As[q][r] = v.x; As[q + 1][r] = v.y; As[q + 2][r] = v.z; As[q + 3][r] = v.w;\n"
                   f"      }}") if vec_a else \
                  (f"      for (int e = tid; e < {t.tm * t.tk}; e += {nt}) {{\n"
                   f"        const int r = e / {t.tk}, q = e % {t.tk};\n"
                   f"        As[q][r] = {ld('a', f'(bm + r) * ({idx}){lda} + k0 + q')};\n      }}")
    load_b_fast = (f"      for (int e = tid; e < {t.tk * t.tn // 4}; e += {nt}) {{\n"
                   f"        const int q = e / {t.tn // 4}, cc = (e % {t.tn // 4}) * 4;\n"
                   f"        vstore4(vload4(0, b + (k0 + q) * ({idx}){ldb} + bn + cc), 0, &Bs[q][cc]);\n"
                   f"      }}") if vec_b else \
                  (f"      for (int e = tid; e < {t.tk * t.tn}; e += {nt}) {{\n"
                   f"        const int q = e / {t.tn}, cc = e % {t.tn};\n"
                   f"        Bs[q][cc] = {ld('b', f'(k0 + q) * ({idx}){ldb} + bn + cc')};\n      }}")
    zero = f"(({acc})0)"
    body = f"""{_prologue(t, idx, _st(a_dt), _st(b_dt), _st(dt), a_off, b_off, c_off)}
  __local {acc} As[{t.tk}][{t.tm + (1 if t.tm % 2 == 0 else 0)}];
  __local {acc} Bs[{t.tk}][{t.tn + (4 if vec_b else 1)}];
  {acc} acc[{t.wm}][{t.wn}];
  for (int i = 0; i < {t.wm}; i++) for (int j = 0; j < {t.wn}; j++) acc[i][j] = {zero};
  const int full_mn = (bm + {t.tm} <= {m}) && (bn + {t.tn} <= {n});
  for ({idx} k0 = 0; k0 < {kk}; k0 += {t.tk}) {{
    if (full_mn && k0 + {t.tk} <= {kk}) {{
{load_a_fast}
{load_b_fast}
    }} else {{
      for (int e = tid; e < {t.tm * t.tk}; e += {nt}) {{
        const int r = e / {t.tk}, q = e % {t.tk};
        As[q][r] = (bm + r < {m} && k0 + q < {kk}) ? {ld('a', f'(bm + r) * ({idx}){lda} + k0 + q')} : {zero};
      }}
      for (int e = tid; e < {t.tk * t.tn}; e += {nt}) {{
        const int q = e / {t.tn}, cc = e % {t.tn};
        Bs[q][cc] = (k0 + q < {kk} && bn + cc < {n}) ? {ld('b', f'(k0 + q) * ({idx}){ldb} + bn + cc')} : {zero};
      }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int q = 0; q < {t.tk}; q++) {{
      {acc} ar[{t.wm}], br[{t.wn}];
      #pragma unroll
      for (int i = 0; i < {t.wm}; i++) ar[i] = As[q][ty + i * {ly}];
      #pragma unroll
      for (int j = 0; j < {t.wn}; j++) br[j] = Bs[q][tx + j * {lx}];
      #pragma unroll
      for (int i = 0; i < {t.wm}; i++) {{
        #pragma unroll
        for (int j = 0; j < {t.wn}; j++) {{ {mul_add} }}
      }}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
{_store_tile(t, idx, m, n, dt, acc, wraps, bias, bias_off)}"""
    if t.vl and acc == "float" and a_dt is DType.F32 and b_dt is DType.F32:
        body = _vector_local(t, idx, m, n, kk, lda, ldb, a_off, b_off, c_off, vec_a, vec_b, aligned, bias, bias_off)
    elif t.db:
        body = _double_buffered(t, dt, acc, idx, m, n, kk, lda, ldb, a_off, b_off, c_off, a_dt, b_dt, vec_a, vec_b,
                                ld, mul_add, wraps, bias, bias_off)
    attrs = f"__attribute__((reqd_work_group_size({lx}, {ly}, 1))) "
    k.kernel(params, body, (-(-n // t.tn) * lx, -(-m // t.tm) * ly, batch), (lx, ly, 1), attrs=attrs)


def _double_buffered(t: Tile, dt, acc, idx, m, n, kk, lda, ldb, a_off, b_off, c_off, a_dt, b_dt, vec_a, vec_b,
                     ld, mul_add, wraps, bias, bias_off) -> str:
    """The GEMM body with two local buffers: the next K-tile is read into registers while
    the current one is multiplied, then stored into the other buffer (one barrier per tile)."""
    lx, ly = t.lx, t.ly
    nt = lx * ly
    na, nb = t.tm * t.tk, t.tk * t.tn
    ra, rb = -(-na // nt), -(-nb // nt)
    ra4, rb4 = -(-(na // 4) // nt), -(-(nb // 4) // nt)
    nk = -(-kk // t.tk)
    zero = f"(({acc})0)"
    tmp, tnp = t.tm + (1 if t.tm % 2 == 0 else 0), t.tn + (4 if vec_b else 1)
    regs_a, regs_b = max(ra, 4 * ra4 if vec_a else 0), max(rb, 4 * rb4 if vec_b else 0)
    fetch_scalar, store_scalar = _scalar_staging(t, idx, m, n, kk, lda, ldb, ld, zero, "")
    fetch_vec = store_vec = ""
    if vec_a and vec_b:
        fetch_vec = _vector_fetch(t, idx, lda, ldb, False, "")
        store_vec = f"""      for (int u = 0; u < {ra4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {na // 4}) {{ const int r = e / {t.tk // 4}, q = (e % {t.tk // 4}) * 4;
          As[nxt][q][r] = pa[4 * u]; As[nxt][q + 1][r] = pa[4 * u + 1];
          As[nxt][q + 2][r] = pa[4 * u + 2]; As[nxt][q + 3][r] = pa[4 * u + 3]; }}
      }}
      for (int u = 0; u < {rb4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {nb // 4}) {{ const int q = e / {t.tn // 4}, cc = (e % {t.tn // 4}) * 4;
          vstore4(vload4(u, pb), 0, &Bs[nxt][q][cc]); }}
      }}"""
    if fetch_vec:
        fetch, store_ = _full_tiles_vectorized(t, kk, fetch_vec, fetch_scalar, store_vec, store_scalar)
    else:
        fetch, store_ = fetch_scalar, store_scalar
    step = f"""      {acc} ar[{t.wm}], br[{t.wn}];
      #pragma unroll
      for (int i = 0; i < {t.wm}; i++) ar[i] = As[cur][q][ty + i * {ly}];
      #pragma unroll
      for (int j = 0; j < {t.wn}; j++) br[j] = Bs[cur][q][tx + j * {lx}];
      #pragma unroll
      for (int i = 0; i < {t.wm}; i++) {{
        #pragma unroll
        for (int j = 0; j < {t.wn}; j++) {{ {mul_add} }}
      }}"""
    return f"""{_prologue(t, idx, _st(a_dt), _st(b_dt), _st(dt), a_off, b_off, c_off)}
  __local {acc} As[2][{t.tk}][{tmp}];
  __local {acc} Bs[2][{t.tk}][{tnp}];
  {acc} acc[{t.wm}][{t.wn}];
  {acc} pa[{regs_a}], pb[{regs_b}];
  for (int i = 0; i < {t.wm}; i++) for (int j = 0; j < {t.wn}; j++) acc[i][j] = {zero};
{_pipelined_k_loop(t, idx, m, n, nk, fetch, store_, step)}
{_store_tile(t, idx, m, n, dt, acc, wraps, bias, bias_off)}"""


def _vector_local(t: Tile, idx: str, m, n, kk, lda, ldb, a_off, b_off, c_off, vec_a, vec_b, aligned, bias, bias_off) -> str:
    """The f32 GEMM body of a /v tile: double-buffered like /db, with both local tiles
    read as float4. Work-item (tx, ty) owns rows ``g*4*LY + ty*4 + (0..3)`` for
    ``g < WM/4`` and columns ``h*4*LX + tx*4 + (0..3)`` for ``h < WN/4``: per K step it
    does WM/4 + WN/4 16-byte local reads (consecutive work-items read consecutive
    16-byte words: no bank conflicts) for WM*WN fused multiply-adds. Local rows are
    padded to a multiple of 4 floats (16-byte aligned float4 reads); A is stored
    transposed (K-major). Full tiles are fetched as float4 (aligned loads when the
    caller guarantees the alignment), edge tiles element by element with bounds."""
    lx, ly = t.lx, t.ly
    nt = lx * ly
    na, nb = t.tm * t.tk, t.tk * t.tn
    ra, rb = -(-na // nt), -(-nb // nt)
    ra4, rb4 = -(-(na // 4) // nt), -(-(nb // 4) // nt)
    nk = -(-kk // t.tk)
    tmp, tnp = t.tm + 4, t.tn + 4
    ga, gb = t.wm // 4, t.wn // 4
    fetch_scalar, store_scalar = _scalar_staging(t, idx, m, n, kk, lda, ldb, lambda p, at: f"{p}[{at}]", "0.0f",
                                                 "      #pragma unroll\n")
    if vec_a and vec_b:
        fetch_vec = _vector_fetch(t, idx, lda, ldb, aligned, "      #pragma unroll\n")
        store_vec = f"""      #pragma unroll
      for (int u = 0; u < {ra4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {na // 4}) {{ const int r = e / {t.tk // 4}, q = (e % {t.tk // 4}) * 4;
          As[nxt][q][r] = pa[4 * u]; As[nxt][q + 1][r] = pa[4 * u + 1];
          As[nxt][q + 2][r] = pa[4 * u + 2]; As[nxt][q + 3][r] = pa[4 * u + 3]; }}
      }}
      #pragma unroll
      for (int u = 0; u < {rb4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {nb // 4}) {{ const int q = e / {t.tn // 4}, cc = (e % {t.tn // 4}) * 4;
          *(__local float4*)&Bs[nxt][q][cc] = vload4(u, pb); }}
      }}"""
        fetch, store_ = _full_tiles_vectorized(t, kk, fetch_vec, fetch_scalar, store_vec, store_scalar)
        regs = f"  float pa[{max(ra, 4 * ra4)}], pb[{max(rb, 4 * rb4)}];  // one register set for both paths"
    else:
        fetch, store_ = fetch_scalar, store_scalar
        regs = f"  float pa[{ra}], pb[{rb}];"
    fmas = "\n".join(f"      acc[{i}][{j}] = fma(a{i // 4}.s{i % 4}, b{j // 4}.s{j % 4}, acc[{i}][{j}]);"
                     for i in range(t.wm) for j in range(t.wn))
    reads = "\n".join([f"      const float4 a{g} = ((__local const float4*)As[cur][q])[{g * ly} + ty];" for g in range(ga)]
                      + [f"      const float4 b{h} = ((__local const float4*)Bs[cur][q])[{h * lx} + tx];"
                         for h in range(gb)])
    step = reads + "\n" + fmas
    bias_add = f"v += bias[({bias_off}) + r];" if bias is not None else ""
    return f"""{_prologue(t, idx, "float", "float", "float", a_off, b_off, c_off)}
  __local float As[2][{t.tk}][{tmp}] __attribute__((aligned(16)));
  __local float Bs[2][{t.tk}][{tnp}] __attribute__((aligned(16)));
  float acc[{t.wm}][{t.wn}];
{regs}
  for (int i = 0; i < {t.wm}; i++) for (int j = 0; j < {t.wn}; j++) acc[i][j] = 0.0f;
{_pipelined_k_loop(t, idx, m, n, nk, fetch, store_, step)}
  #pragma unroll
  for (int i = 0; i < {t.wm}; i++) {{
    const {idx} r = bm + (i / 4) * {4 * ly} + ty * 4 + (i % 4);
    if (r >= {m}) continue;
    #pragma unroll
    for (int j = 0; j < {t.wn}; j++) {{
      const {idx} col = bn + (j / 4) * {4 * lx} + tx * 4 + (j % 4);
      if (col < {n}) {{
        float v = acc[i][j];
        {bias_add}
        cm[r * {n} + col] = v;
      }}
    }}
  }}"""


def _prologue(t: Tile, idx: str, a_t: str, b_t: str, c_t: str, a_off, b_off, c_off) -> str:
    """A GEMM body's first lines: the work-item's place in its tile, the tile's origin in C,
    the batch, and the batch's A, B and C (``a``, ``b``, ``cm``) as ``a_t``/``b_t``/``c_t``."""
    return f"""  const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * {t.lx} + tx;
  const {idx} bn = ({idx})get_group_id(0) * {t.tn}, bm = ({idx})get_group_id(1) * {t.tm};
  const {idx} batch = get_group_id(2);
  __global const {a_t}* a = A + ({a_off});
  __global const {b_t}* b = B + ({b_off});
  __global {c_t}* cm = C + ({c_off});"""


def _store_tile(t: Tile, idx: str, m, n, dt: DType, acc: str, wraps: bool, bias, bias_off) -> str:
    """Writes the work-item's accumulators (rows ``ty + i*LY``, columns ``tx + j*LX``) into C
    with the bias added, inside the matrix only."""
    return f"""  for (int i = 0; i < {t.wm}; i++) {{
    const {idx} r = bm + ty + i * {t.ly};
    if (r >= {m}) continue;
    for (int j = 0; j < {t.wn}; j++) {{
      const {idx} col = bn + tx + j * {t.lx};
      if (col < {n}) {{
        {acc} v = acc[i][j];
        {_bias(dt, bias, bias_off)}
        {store(dt, 'cm', f'r * {n} + col', f'(({ctype(dt)})v)' if wraps else 'v')}
      }}
    }}
  }}"""


def _scalar_staging(t: Tile, idx: str, m, n, kk, lda, ldb, ld, zero: str, unroll: str) -> tuple[str, str]:
    """(fetch, store) of a double-buffered K-tile element by element, with bounds: fetch reads
    the tile at ``k0`` into the registers ``pa``/``pb`` (``ld(ptr, index)`` loads, ``zero``
    outside the matrices), store writes them into local buffer ``nxt`` (A transposed).
    ``unroll`` goes before each loop."""
    lx, ly = t.lx, t.ly
    nt = lx * ly
    na, nb = t.tm * t.tk, t.tk * t.tn
    ra, rb = -(-na // nt), -(-nb // nt)
    fetch = f"""{unroll}      for (int u = 0; u < {ra}; u++) {{
        const int e = tid + u * {nt};
        if (e < {na}) {{ const int r = e / {t.tk}, q = e % {t.tk};
          pa[u] = (bm + r < {m} && k0 + q < {kk}) ? {ld('a', f'(bm + r) * ({idx}){lda} + k0 + q')} : {zero}; }}
      }}
{unroll}      for (int u = 0; u < {rb}; u++) {{
        const int e = tid + u * {nt};
        if (e < {nb}) {{ const int q = e / {t.tn}, cc = e % {t.tn};
          pb[u] = (k0 + q < {kk} && bn + cc < {n}) ? {ld('b', f'(k0 + q) * ({idx}){ldb} + bn + cc')} : {zero}; }}
      }}"""
    store_ = f"""{unroll}      for (int u = 0; u < {ra}; u++) {{
        const int e = tid + u * {nt};
        if (e < {na}) As[nxt][e % {t.tk}][e / {t.tk}] = pa[u];
      }}
{unroll}      for (int u = 0; u < {rb}; u++) {{
        const int e = tid + u * {nt};
        if (e < {nb}) Bs[nxt][e / {t.tn}][e % {t.tn}] = pb[u];
      }}"""
    return fetch, store_


def _vector_fetch(t: Tile, idx: str, lda, ldb, aligned: bool, unroll: str) -> str:
    """Reads a full K-tile at ``k0`` as float4 into the registers ``pa``/``pb`` (aligned
    float4 loads when ``aligned``, else ``vload4``); ``unroll`` goes before each loop."""
    nt = t.lx * t.ly
    na, nb = t.tm * t.tk, t.tk * t.tn
    ra4, rb4 = -(-(na // 4) // nt), -(-(nb // 4) // nt)

    def g4(ptr, at):
        return f"*(__global const float4*)({ptr} + {at})" if aligned else f"vload4(0, {ptr} + {at})"
    return f"""{unroll}      for (int u = 0; u < {ra4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {na // 4}) {{ const int r = e / {t.tk // 4}, q = (e % {t.tk // 4}) * 4;
          vstore4({g4('a', f'(bm + r) * ({idx}){lda} + k0 + q')}, u, pa); }}
      }}
{unroll}      for (int u = 0; u < {rb4}; u++) {{
        const int e = tid + u * {nt};
        if (e < {nb // 4}) {{ const int q = e / {t.tn // 4}, cc = (e % {t.tn // 4}) * 4;
          vstore4({g4('b', f'(k0 + q) * ({idx}){ldb} + bn + cc')}, u, pb); }}
      }}"""


def _full_tiles_vectorized(t: Tile, kk, fetch_vec: str, fetch_scalar: str, store_vec: str,
                           store_scalar: str) -> tuple[str, str]:
    """(fetch, store) that take the ``_vec`` path for a K-tile fully inside the matrices
    (``vec``, decided at fetch time and kept for the store), else the ``_scalar`` one."""
    fetch = (f"    vec = full_mn && k0 + {t.tk} <= {kk};\n    if (vec) {{\n{fetch_vec}\n    }} else {{\n"
             f"{fetch_scalar}\n    }}")
    store_ = f"    if (vec) {{\n{store_vec}\n    }} else {{\n{store_scalar}\n    }}"
    return fetch, store_


def _pipelined_k_loop(t: Tile, idx: str, m, n, nk: int, fetch: str, store_: str, step: str) -> str:
    """The double-buffered walk over K: K-tile 0 is fetched and stored into buffer 0, then
    each iteration fetches the next K-tile into registers, runs ``step`` for each ``q`` of
    the current buffer ``cur``, and stores the registers into the other buffer ``nxt``
    (one barrier per tile). ``fetch``/``store_`` may branch on ``vec`` (a full tile)."""
    return f"""  const int full_mn = (bm + {t.tm} <= {m}) && (bn + {t.tn} <= {n});
  int vec = 0;
  if ({nk} > 0) {{
    const {idx} k0 = 0;
    const int nxt = 0;
{fetch}
{store_}
  }}
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int tt = 0; tt < {nk}; tt++) {{
    const int cur = tt & 1, nxt = cur ^ 1;
    const {idx} k0 = ({idx})(tt + 1) * {t.tk};
    const int more = tt + 1 < {nk};
    if (more) {{
{fetch}
    }}
    #pragma unroll
    for (int q = 0; q < {t.tk}; q++) {{
{step}
    }}
    if (more) {{
{store_}
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
  }}"""


def _st(dt: DType) -> str:
    from .types import cstore
    return cstore(dt)


def _bias(dt: DType, bias, bias_off: str) -> str:
    if bias is None:
        return ""
    return f"v += {load(dt, 'bias', f'({bias_off}) + r')};"


def _complex_matmul(k: KernelContext, m, n, kk, batch, a_off, b_off) -> None:
    dt = k.out.dtype
    p = _CPREFIX[dt]
    total = batch * m * n
    idx = idx_type(total, batch * m * kk, batch * kk * n)
    params = [(k.buf("A", dt, True), k.node.inputs[0]), (k.buf("B", dt, True), k.node.inputs[1]),
              (k.buf("C", dt), Ref(k.node.id))]
    body = (f"    const {idx} batch = e / {m * n}, r = (e / {n}) % {m}, col = e % {n};\n"
            f"    __global const {ctype(dt)}* a = A + ({a_off});\n"
            f"    __global const {ctype(dt)}* b = B + ({b_off});\n"
            f"    {ctype(dt)} acc = {literal(dt, 0)};\n"
            f"    for ({idx} q = 0; q < {kk}; q++) acc += {p}_mul(a[r * {kk} + q], b[q * {n} + col]);\n"
            f"    C[e] = acc;")
    k.kernel(params, linear_loop("e", total, idx, body), groups(total, k.wg, k.max_groups()), k.wg)


def matmul(k: KernelContext) -> None:
    sa, sb = k.inputs
    out = k.out
    a_dims = (1,) + sa.dims if sa.rank == 1 else sa.dims
    b_dims = sb.dims + (1,) if sb.rank == 1 else sb.dims
    m, kk, n = a_dims[-2], a_dims[-1], b_dims[-1]
    batch_dims = tuple(out.dims[:len(out.dims) - (sa.rank > 1) - (sb.rank > 1)])
    batch = math.prod(batch_dims)
    coords = unravel("batch", batch_dims) if batch_dims else []
    a_off = f"({broadcast_index(batch_dims, a_dims[:-2], coords)}) * {m * kk}" if a_dims[:-2] else "0"
    b_off = f"({broadcast_index(batch_dims, b_dims[:-2], coords)}) * {kk * n}" if b_dims[:-2] else "0"
    c_off = f"batch * {m * n}"
    if is_complex(out.dtype):
        _complex_matmul(k, m, n, kk, batch, a_off, b_off)
        return
    # Offsets are multiples of m*kk and kk*n: of 4 wherever lda = kk (ldb = n) is.
    gemm(k, k.node.inputs[0], k.node.inputs[1], Ref(k.node.id), out.dtype, m, n, kk, batch, a_off, b_off, c_off,
         aligned=True)


def dense_solve(k: KernelContext) -> None:
    from rlx_core.ir.ops.linalg import solve_rhs_is_vector
    sa, sb = k.inputs
    out = k.out
    dt = out.dtype
    nn = sa.dims[-1]
    vector = solve_rhs_is_vector(sa.dims, sb.dims)
    rhs_dims = sb.dims + (1,) if vector else sb.dims
    nrhs = rhs_dims[-1]
    batch_dims = out.dims[:len(out.dims) - (1 if vector else 2)]
    batch = math.prod(batch_dims)
    if batch == 0 or nn == 0:
        return
    t = ctype(dt)
    complex_ = is_complex(dt)
    p = _CPREFIX.get(dt)
    coords = unravel("s", batch_dims) if batch_dims else []
    a_off = f"({broadcast_index(batch_dims, sa.dims[:-2], coords)}) * {nn * nn}" if sa.dims[:-2] else "0"
    b_off = f"({broadcast_index(batch_dims, rhs_dims[:-2], coords)}) * {nn * nrhs}" if rhs_dims[:-2] else "0"
    wa = k.scratch(batch * nn * nn * (8 if dt in (DType.F64, DType.C64) else 16 if dt is DType.C128 else 4))
    params = [(k.buf("A", dt, True), k.node.inputs[0]), (k.buf("B", dt, True), k.node.inputs[1]),
              (f"__global {t}* W", wa), (k.buf("X", dt), Ref(k.node.id))]
    mag = (lambda v: f"{p}_abs({v})") if complex_ else (lambda v: f"fabs({v})")
    mul = (lambda x, y: f"{p}_mul({x}, {y})") if complex_ else (lambda x, y: f"({x}) * ({y})")
    div = (lambda x, y: f"{p}_div({x}, {y})") if complex_ else (lambda x, y: f"({x}) / ({y})")
    idx = idx_type(batch * nn * max(nn, nrhs))
    body = f"""    __global {t}* w = W + s * {nn * nn};
    __global {t}* x = X + s * {nn * nrhs};
    const {idx} ao = {a_off}, bo = {b_off};
    for (int e = 0; e < {nn * nn}; e++) w[e] = {load(dt, 'A', 'ao + e')};
    for (int e = 0; e < {nn * nrhs}; e++) x[e] = {load(dt, 'B', 'bo + e')};
    for (int c = 0; c < {nn}; c++) {{
      int piv = c;
      for (int r = c + 1; r < {nn}; r++) if ({mag('w[r * ' + str(nn) + ' + c]')} > {mag('w[piv * ' + str(nn) + ' + c]')}) piv = r;
      if (piv != c) {{
        for (int j = 0; j < {nn}; j++) {{ {t} tmp = w[c * {nn} + j]; w[c * {nn} + j] = w[piv * {nn} + j]; w[piv * {nn} + j] = tmp; }}
        for (int j = 0; j < {nrhs}; j++) {{ {t} tmp = x[c * {nrhs} + j]; x[c * {nrhs} + j] = x[piv * {nrhs} + j]; x[piv * {nrhs} + j] = tmp; }}
      }}
      const {t} d = w[c * {nn} + c];
      for (int r = c + 1; r < {nn}; r++) {{
        const {t} f = {div(f'w[r * {nn} + c]', 'd')};
        for (int j = c + 1; j < {nn}; j++) w[r * {nn} + j] -= {mul('f', f'w[c * {nn} + j]')};
        for (int j = 0; j < {nrhs}; j++) x[r * {nrhs} + j] -= {mul('f', f'x[c * {nrhs} + j]')};
      }}
    }}
    for (int c = {nn - 1}; c >= 0; c--) {{
      for (int j = 0; j < {nrhs}; j++) {{
        {t} v = x[c * {nrhs} + j];
        for (int q = c + 1; q < {nn}; q++) v -= {mul(f'w[c * {nn} + q]', f'x[q * {nrhs} + j]')};
        x[c * {nrhs} + j] = {div('v', f'w[c * {nn} + c]')};
      }}
    }}"""
    k.kernel(params, linear_loop("s", batch, idx, body), groups(batch, k.wg, k.max_groups()), k.wg)


GENERATORS = {"matmul": matmul, "dense_solve": dense_solve}

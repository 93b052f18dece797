"""Attention kernels that never materialize the score matrix (flash attention).

Both kernels stream the keys in tiles and keep, per query row, the running maximum
``m``, the running sum ``l`` of ``exp(s - m)`` and the output accumulator ``o``
(rescaled by ``exp(m_old - m_new)`` whenever the maximum grows): the online softmax,
in f32 (f64 for f64). The output is ``o / l``, rounded once; a row that sees no key
has ``l = 0`` and outputs zeros, as the IR defines.

* :class:`FlashAttentionKernel` (f16 / bf16): tensor cores through ``mma.sync``
  m16n8k16 with f32 accumulators. A block of 4 warps owns 64 query rows (16 per warp);
  ``S = Q K^T`` stays in registers, is scaled / soft-capped / masked there, and its
  exponentials become, rounded to the input dtype, the A operand of ``O += P V``
  (the accumulator layout of m16n8k16 is its A layout); ``l`` sums them unrounded. K and V tiles go through
  shared memory; V is read transposed by ``ldmatrix .trans``.
* :class:`DecodeAttentionKernel` (every float dtype): plain FMA for few query rows
  per KV head (decoding: one new token, or a GQA group of them). Scores and
  probabilities go through shared memory; the 128 threads split keys, then outputs.

Rows are the query rows of one KV head's group: row ``r`` of KV head ``kvh`` is query
``i = r % Sq`` of head ``h = kvh * G + r / Sq`` (``G = Hq / Hkv``), so GQA heads share
every K/V tile. Query ``i`` sits at key position ``p = i + Sk - Sq``. Under causal and
sliding masks a block visits only the keys its rows can see; the mask itself is still
applied to every score, so that skipping is only an optimization.

With ``splits > 1`` the key range of every block is cut into ``splits`` parts run by
separate blocks (flash-decoding: parallelism when batch x heads is small); each part
writes its normalized output and ``log(sum)`` to a scratch buffer, and
:class:`CombineKernel` merges them. All operands are read and the output written
through element strides (``rlx_cuda.views``), so the q/k/v split and head transposes
of a transformer block are never materialized.
"""
from __future__ import annotations

from dataclasses import dataclass
from string import Template

from rlx_core.ir import DType

from ..dtypes import device_type
from .elementwise import Access
from .preamble import KERNEL_NAME, PREAMBLE

__all__ = ["AttentionProblem", "FlashAttentionKernel", "DecodeAttentionKernel", "CombineKernel", "MMA_PRIMITIVES",
           "ATTENTION_BLOCK", "FLASH_MAX_HEAD_DIM", "decode_tile_keys", "flash_supports", "choose_splits"]

ATTENTION_BLOCK = 128             # threads per block of both kernels
FLASH_TILE = 64                   # query rows per flash block (16 per warp) = keys per K/V tile
                                  # (the K tile's buffer also stages the block's Q tile)
FLASH_MAX_HEAD_DIM = 128          # D and Dv up to this (registers hold a row's Q and O)
DECODE_MAX_BLOCK_ROWS = 16        # query rows per decode block
DECODE_SMEM_BYTES = 46 * 1024     # static shared memory of a decode block, at most
_VECTOR_BYTES = 16

# Inline PTX of the tensor-core kernel: mma.sync m16n8k16 (f32 accumulators) and a
# transposing 4-matrix ldmatrix. Fragment layouts (PTX ISA, "mma.m16n8k16"): with
# g = lane / 4, t = lane % 4, A holds rows g / g+8 x cols 2t, 2t+1 / +8 (registers
# a0..a3 = (g, 2t) (g+8, 2t) (g, 2t+8) (g+8, 2t+8), two 16-bit values each, the lower
# column in the low half), B holds rows (k) 2t, 2t+1 / +8 x col g, C holds rows g / g+8
# x cols 2t, 2t+1. The test emulator substitutes host versions of exactly this block.
MMA_PRIMITIVES = r"""
RLX_D void rlx_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
RLX_D void rlx_mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* Two floats rounded (to nearest even) to 16-bit floats, packed: lo in the low half. */
RLX_D unsigned rlx_pack_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
RLX_D unsigned rlx_pack_f16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
/* Four 8x8 matrices of 16-bit values; lane 8m + i gives the address of row i of matrix m
   (16-byte aligned); lane 4r + w receives elements (2w, r), (2w + 1, r) of each matrix. */
RLX_D void rlx_ldmatrix_x4_trans(unsigned (&r)[4], const unsigned short* row) {
  unsigned addr;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
"""


@dataclass(frozen=True)
class AttentionProblem:
    """One attention node as the kernels see it: sizes, mask semantics, and how each
    operand is laid out (``Access``: element offset and strides over ``[B, H, S, D]``;
    the offsets go into the launch's buffer arguments, the strides into the source).
    ``mask_strides``: broadcast strides of a custom / bias mask over ``[B, Hq, Sq, Sk]``."""

    dtype: DType
    b: int
    hq: int
    hkv: int
    sq: int
    sk: int
    d: int
    dv: int
    mask: str
    window: int | None
    scale: float
    softcap: float | None
    q: Access
    k: Access
    v: Access
    out: Access
    mask_strides: tuple[int, int, int, int] | None = None

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    @property
    def rows(self) -> int:
        """Query rows per KV head."""
        return self.group * self.sq

    @property
    def heads(self) -> int:
        """(batch, KV head) pairs."""
        return self.b * self.hkv

    @property
    def acc(self) -> str:
        return "double" if self.dtype is DType.F64 else "float"


def flash_supports(dtype: DType, d: int, dv: int) -> bool:
    return dtype in (DType.F16, DType.BF16) and 0 < d <= FLASH_MAX_HEAD_DIM and 0 < dv <= FLASH_MAX_HEAD_DIM


def decode_tile_keys(dtype: DType, block_rows: int, d: int, dv: int) -> int | None:
    """Keys per tile of a decode block (the most whose shared memory fits), or None."""
    size = 8 if dtype is DType.F64 else 4
    for keys in (64, 32, 16, 8):
        words = block_rows * max(d, 1) + keys * (d + 1) + keys * max(dv, 1) + block_rows * keys + 3 * block_rows
        if words * size <= DECODE_SMEM_BYTES:
            return keys
    return None


def choose_splits(blocks: int, key_tiles: int, sm_count: int, forced: int | None) -> int:
    """How many parts to cut each block's keys into: more blocks when ``blocks`` alone
    would leave SMs idle and there are enough key tiles to share (about two per part)."""
    if forced:
        return forced
    if blocks >= sm_count or key_tiles < 4:
        return 1
    return max(1, min(key_tiles // 2, -(-2 * sm_count // blocks)))


# --- C building blocks shared by the kernels ------------------------------------------------
def _vectorizable(acc: Access, cols: int, itemsize: int) -> bool:
    """Whether rows of ``cols`` elements can be read in 16-byte pieces: unit stride along
    D and every row start, the buffer offset included, 16-byte aligned."""
    w = _VECTOR_BYTES // itemsize
    return cols > 0 and acc.strides[3] == 1 and cols % w == 0 and acc.offset % w == 0 \
        and all(s % w == 0 for s in acc.strides[:3])


def _offset(acc: Access, b: str, h: str, s: str) -> str:
    s0, s1, s2, _ = acc.strides
    return f"(long long){b} * {s0}LL + (long long){h} * {s1}LL + (long long){s} * {s2}LL"


def _query_row(p: AttentionProblem, r: str, name: str) -> str:
    """C declaring ``{name}_h`` and ``{name}_i`` (head and query index) of row ``r``."""
    return f"const int {name}_h = kvh * {p.group} + ({r}) / {p.sq}, {name}_i = ({r}) % {p.sq};"


def _key_range(p: AttentionProblem) -> str:
    """C declaring ``k_lo``/``k_hi``: the keys visible to any row in ``[r0, r_end)``."""
    if p.mask not in ("causal", "sliding"):
        return f"const int k_lo = 0, k_hi = {p.sk};"
    lines = [f"const bool one_head = r0 / {p.sq} == (r_end - 1) / {p.sq};",
             f"const int i_min = one_head ? r0 % {p.sq} : 0, i_max = one_head ? (r_end - 1) % {p.sq} : {p.sq - 1};",
             f"const int k_hi = min({p.sk}, i_max + {p.sk - p.sq + 1});"]
    if p.mask == "sliding":
        lines.append(f"const int k_lo = max(0, i_min + {p.sk - p.sq - p.window + 1});")
    else:
        lines.append("const int k_lo = 0;")
    return "\n  ".join(lines)


def _score_function(p: AttentionProblem) -> str:
    """``rlx_attn_score``: the score of query row (b, h, i) and key j from ``q . k``,
    scaled, soft-capped and masked (-inf when hidden or out of range)."""
    acc, dt = p.acc, device_type(p.dtype)
    inf = "rlx_inf_d()" if acc == "double" else "rlx_inf_f()"
    lines = [f"RLX_D {acc} rlx_attn_score({acc} dot, int b, int h, int i, int j, bool ok, "
             f"const {_mask_type(p)}* mask) {{",
             f"  if (!ok || j >= {p.sk}) return -{inf};"]
    position = f"i + {p.sk - p.sq}"
    if p.mask == "causal":
        lines.append(f"  if (j > {position}) return -{inf};")
    elif p.mask == "sliding":
        lines.append(f"  if (j > {position} || j <= {position} - {p.window}) return -{inf};")
    moff = None
    if p.mask in ("custom", "bias"):
        ms = p.mask_strides
        moff = (f"(long long)b * {ms[0]}LL + (long long)h * {ms[1]}LL + (long long)i * {ms[2]}LL"
                f" + (long long)j * {ms[3]}LL")
    if p.mask == "custom":
        lines.append(f"  if (!mask[{moff}]) return -{inf};")
    else:
        lines.append("  (void)mask; (void)b; (void)h;")
    lines.append(f"  {acc} s = dot * ({acc}){float(p.scale)!r};")
    if p.softcap is not None:
        c = f"({acc}){float(p.softcap)!r}"
        lines.append(f"  s = {c} * rlx_tanh(s / {c});")
    if p.mask == "bias":
        lines.append(f"  s += ({acc}){dt.load_from(f'mask[{moff}]')};")
    lines += ["  return s;", "}"]
    return "\n".join(lines)


def _mask_type(p: AttentionProblem) -> str:
    return "unsigned char" if p.mask == "custom" else device_type(p.dtype).store


def _load_rows(dst: str, ld: int, rows: str, cols: int, padded: int, src: str, acc: Access, dtype: DType,
               row_setup: str, convert: str | None, vector: bool) -> str:
    """C loading ``rows`` rows of ``cols`` elements into shared ``dst`` (row stride ``ld``),
    zero-filling columns ``cols..padded`` and rows that ``row_setup`` marks not ``ok``.
    ``row_setup`` declares ``ok`` and ``off`` (the row's element offset) from ``row``;
    ``convert`` maps a stored value to the shared type (None: the bits are copied)."""
    st = device_type(dtype).store
    if padded == 0:
        return "/* nothing to load: zero-length rows */"
    if vector:
        w = _VECTOR_BYTES // dtype.itemsize
        chunks = padded // w
        if convert is None:
            store = f"*(rlx_v16*)({dst} + row * {ld} + col) = val;"
        else:
            store = (f"const {st}* e = (const {st}*)&val;\n"
                     f"      for (int x = 0; x < {w}; ++x) {dst}[row * {ld} + col + x] = {convert.format('e[x]')};")
        return (f"for (int n = threadIdx.x; n < ({rows}) * {chunks}; n += {ATTENTION_BLOCK}) {{\n"
                f"    const int row = n / {chunks}, col = n % {chunks} * {w};\n"
                f"    {row_setup}\n"
                "    rlx_v16 val = {};\n"
                f"    if (ok && col < {cols}) val = *(const rlx_v16*)({src} + off + col);\n"
                f"    {store}\n"
                "  }")
    value = f"{src}[off + (long long)col * {acc.strides[3]}LL]"
    zero = "(unsigned short)0" if convert is None else "0"
    loaded = value if convert is None else convert.format(value)
    return (f"for (int n = threadIdx.x; n < ({rows}) * {padded}; n += {ATTENTION_BLOCK}) {{\n"
            f"    const int row = n / {padded}, col = n % {padded};\n"
            f"    {row_setup}\n"
            f"    {dst}[row * {ld} + col] = (ok && col < {cols}) ? {loaded} : {zero};\n"
            "  }")


def _query_row_setup(p: AttentionProblem) -> str:
    return (f"const int r = r0 + row; const bool ok = r < r_end; {_query_row(p, 'r', 'q')} "
            f"const long long off = {_offset(p.q, 'b', 'q_h', 'q_i')};")


def _key_row_setup(p: AttentionProblem, acc: Access) -> str:
    return (f"const int key = kb + row; const bool ok = key < {p.sk}; "
            f"const long long off = {_offset(acc, 'b', 'kvh', 'key')};")


def _block_coordinates(p: AttentionProblem, rows_per_block: int, splits: int, reverse: bool) -> str:
    """C declaring split, the block's row range [r0, r_end), bk / b / kvh, the key range
    and this split's key tiles [t_begin, t_end) of ``keys`` keys (``BN``)."""
    tiles = -(-p.rows // rows_per_block)
    tile = f"{tiles - 1} - block % {tiles}" if reverse else f"block % {tiles}"
    return f"""int block = blockIdx.x;
  const int split = block % {splits}; block /= {splits};
  const int tile = {tile};
  const int bk = block / {tiles}, b = bk / {p.hkv}, kvh = bk % {p.hkv};
  const int r0 = tile * {rows_per_block}, r_end = min(r0 + {rows_per_block}, {p.rows});
  {_key_range(p)}
  const int n_tiles = k_hi > k_lo ? (k_hi - k_lo + BN - 1) / BN : 0;
  const int per_split = (n_tiles + {splits} - 1) / {splits};
  const int t_begin = split * per_split, t_end = min(n_tiles, t_begin + per_split);
  (void)split;"""


def _kernel(head: str, params: str, body: str, bounds: bool = True) -> str:
    launch = f"__launch_bounds__({ATTENTION_BLOCK}) " if bounds else ""
    return (PREAMBLE + head + f'\nextern "C" __global__ void {launch}{KERNEL_NAME}({params}) {{\n  '
            + body.strip() + "\n}\n")


_V16 = "struct __align__(16) rlx_v16 { unsigned w[4]; };\n"


# --- tensor cores ------------------------------------------------------------------------------
_FLASH = Template(r"""
  constexpr int BN = $BN, DP = $DP, DVP = $DVP, LDK = DP + 8, LDV = DVP + 8;
  __shared__ __align__(16) unsigned short ks[BN * LDK];  /* also stages the Q tile */
  __shared__ __align__(16) unsigned short vs[BN * LDV];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  $COORDS

  $LOAD_Q
  __syncthreads();
  unsigned qa[DP / 16][4];
  {
    const unsigned short* qrow = ks + (warp * 16 + g) * LDK + 2 * t;
    #pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
      qa[kk][0] = *(const unsigned*)(qrow + kk * 16);
      qa[kk][1] = *(const unsigned*)(qrow + 8 * LDK + kk * 16);
      qa[kk][2] = *(const unsigned*)(qrow + kk * 16 + 8);
      qa[kk][3] = *(const unsigned*)(qrow + 8 * LDK + kk * 16 + 8);
    }
  }
  int row_h[2], row_i[2];
  bool row_ok[2];
  #pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int r = r0 + warp * 16 + g + 8 * x;
    row_ok[x] = r < r_end;
    $ROW
    row_h[x] = q_h; row_i[x] = q_i;
  }
  float m[2] = {-rlx_inf_f(), -rlx_inf_f()}, l[2] = {0.f, 0.f};
  float o[DVP / 8][4];
  #pragma unroll
  for (int n = 0; n < DVP / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

  for (int tt = t_begin; tt < t_end; ++tt) {
    const int kb = k_lo + tt * BN;
    __syncthreads();  /* every warp is done with the previous tiles (and the Q staging) */
    $LOAD_K
    $LOAD_V
    __syncthreads();
    float s[BN / 8][4];
    #pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      const unsigned short* krow = ks + (n * 8 + g) * LDK + 2 * t;
      #pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk) {
        const unsigned kf[2] = {*(const unsigned*)(krow + kk * 16), *(const unsigned*)(krow + kk * 16 + 8)};
        $MMA(s[n], qa[kk], kf);
      }
    }
    float mx[2] = {m[0], m[1]};
    #pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = e / 2;
        s[n][e] = rlx_attn_score(s[n][e], b, row_h[x], row_i[x], kb + n * 8 + 2 * t + (e & 1), row_ok[x], mask);
        mx[x] = fmaxf(mx[x], s[n][e]);
      }
    }
    float base[2];
    #pragma unroll
    for (int x = 0; x < 2; ++x) {
      mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 1));
      mx[x] = fmaxf(mx[x], __shfl_xor_sync(0xffffffffu, mx[x], 2));
      base[x] = mx[x] == -rlx_inf_f() ? 0.f : mx[x];
      const float alpha = __expf(m[x] - base[x]);
      m[x] = mx[x];
      l[x] *= alpha;
      #pragma unroll
      for (int n = 0; n < DVP / 8; ++n) { o[n][2 * x] *= alpha; o[n][2 * x + 1] *= alpha; }
    }
    #pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      unsigned pa[4];
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float* sn = s[2 * kk + half];
        const float p0 = __expf(sn[0] - base[0]), p1 = __expf(sn[1] - base[0]);
        const float p2 = __expf(sn[2] - base[1]), p3 = __expf(sn[3] - base[1]);
        l[0] += p0 + p1;
        l[1] += p2 + p3;
        pa[2 * half] = $PACK(p0, p1);
        pa[2 * half + 1] = $PACK(p2, p3);
      }
      const unsigned short* vrow = vs + (kk * 16 + (lane & 15)) * LDV + (lane >> 4) * 8;
      #pragma unroll
      for (int nq = 0; nq < DVP / 16; ++nq) {
        unsigned vf[4];
        rlx_ldmatrix_x4_trans(vf, vrow + nq * 16);
        const unsigned lo[2] = {vf[0], vf[1]}, hi[2] = {vf[2], vf[3]};
        $MMA(o[2 * nq], pa, lo);
        $MMA(o[2 * nq + 1], pa, hi);
      }
    }
  }
  #pragma unroll
  for (int x = 0; x < 2; ++x) {
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 1);
    l[x] += __shfl_xor_sync(0xffffffffu, l[x], 2);
    if (!row_ok[x]) continue;
    const float inv = l[x] > 0.f ? 1.f / l[x] : 0.f;
    $WRITE_ROW
    #pragma unroll
    for (int n = 0; n < DVP / 8; ++n) {
      #pragma unroll
      for (int y = 0; y < 2; ++y) {
        const int c = n * 8 + 2 * t + y;
        if (c < $DV) { $WRITE }
      }
    }
  }
""")


@dataclass
class _TiledAttention:
    """What the attention kernels share: blocks of ``block_rows`` query rows per head,
    each reading the keys in tiles of ``keys``, the keys split ``splits`` ways."""

    problem: AttentionProblem
    splits: int = 1

    @property
    def row_tiles(self) -> int:
        return -(-self.problem.rows // self.block_rows)

    @property
    def grid(self) -> int:
        return self.problem.heads * self.row_tiles * self.splits

    @property
    def key_tiles(self) -> int:
        return -(-self.problem.sk // self.keys)


@dataclass
class FlashAttentionKernel(_TiledAttention):
    """Flash attention on tensor cores (f16 / bf16, ``flash_supports``); see the module
    docstring. Launch ``grid`` blocks of ``ATTENTION_BLOCK`` threads with arguments
    (q, k, v, mask, out, partials)."""

    block_rows = FLASH_TILE
    keys = FLASH_TILE

    def source(self) -> str:
        p = self.problem
        dp, dvp = _ceil(p.d, 16), _ceil(p.dv, 16)
        item = p.dtype.itemsize
        ld_k, ld_v = dp + 8, dvp + 8
        body = _FLASH.substitute(
            BN=self.keys, DP=dp, DVP=dvp, DV=p.dv, PACK="rlx_pack_bf16" if p.dtype is DType.BF16 else "rlx_pack_f16",
            MMA="rlx_mma_bf16" if p.dtype is DType.BF16 else "rlx_mma_f16",
            COORDS=_block_coordinates(p, FLASH_TILE, self.splits, reverse=True),
            ROW=_query_row(p, "r", "q"),
            LOAD_Q=_load_rows("ks", ld_k, "BN", p.d, dp, "q", p.q, p.dtype, _query_row_setup(p), None,
                              _vectorizable(p.q, p.d, item)),
            LOAD_K=_load_rows("ks", ld_k, "BN", p.d, dp, "k", p.k, p.dtype, _key_row_setup(p, p.k), None,
                              _vectorizable(p.k, p.d, item)),
            LOAD_V=_load_rows("vs", ld_v, "BN", p.dv, dvp, "v", p.v, p.dtype, _key_row_setup(p, p.v), None,
                              _vectorizable(p.v, p.dv, item)),
            **_writes(p, self.splits, "o[n][2 * x + y] * inv", "row_h[x]", "row_i[x]", "r0 + warp * 16 + g + 8 * x",
                      "t == 0", "l[x] > 0.f ? m[x] + logf(l[x]) : -rlx_inf_f()"))
        params = (f"const unsigned short* q, const unsigned short* k, const unsigned short* v, "
                  f"const {_mask_type(p)}* mask, unsigned short* out, float* part")
        return _kernel(MMA_PRIMITIVES + _V16 + _score_function(p), params, body)

    @property
    def partial_bytes(self) -> int:
        return _partial_words(self.problem, self.splits) * 4


def _writes(p: AttentionProblem, splits: int, value: str, h: str, i: str, row: str, lse_writer: str,
            lse: str) -> dict[str, str]:
    """The C of the final writes of a row (``WRITE_ROW``, once per row and thread, where
    ``lse_writer`` is true for one thread per row) and of its column ``c`` (``WRITE``): to
    ``out`` through its strides, or (with splits) the normalized part and the row's
    log-sum-exp ``lse`` to the partials."""
    dt = device_type(p.dtype)
    if splits == 1:
        return {"WRITE_ROW": f"const long long orow = {_offset(p.out, 'b', h, i)};",
                "WRITE": f"out[orow + (long long)c * {p.out.strides[3]}LL] = {dt.to_store(value)};"}
    lse_at = splits * p.heads * p.rows * p.dv
    return {"WRITE_ROW": f"const long long prow = ((long long)split * {p.heads} + bk) * {p.rows} + ({row});\n"
                         f"    if ({lse_writer}) part[{lse_at}LL + prow] = {lse};",
            "WRITE": f"part[prow * {p.dv} + c] = {value};"}


def _partial_words(p: AttentionProblem, splits: int) -> int:
    return splits * p.heads * p.rows * (p.dv + 1) if splits > 1 else 0


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


# --- CUDA cores ---------------------------------------------------------------------------------
_DECODE = Template(r"""
  constexpr int BN = $BN, RT = $RT, D = $D, DV = $DV, LDK = D + 1, OPT = $OPT;
  __shared__ $T qs[RT * $D1];
  __shared__ $T ks[BN * LDK];
  __shared__ $T vs[BN * $DV1];
  __shared__ $T ss[RT * BN];
  __shared__ $T m_s[RT], l_s[RT], a_s[RT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  $COORDS

  $LOAD_Q
  if (threadIdx.x < RT) { m_s[threadIdx.x] = -$INF; l_s[threadIdx.x] = 0; }
  $T acc[OPT];
  #pragma unroll
  for (int u = 0; u < OPT; ++u) acc[u] = 0;
  for (int tt = t_begin; tt < t_end; ++tt) {
    const int kb = k_lo + tt * BN;
    __syncthreads();  /* the previous tile is consumed (and the Q rows are loaded) */
    $LOAD_K
    $LOAD_V
    __syncthreads();
    for (int n = threadIdx.x; n < RT * BN; n += $NT) {
      const int rr = n / BN, jj = n % BN, r = r0 + rr;
      $ROW
      $T dot = 0;
      for (int d = 0; d < D; ++d) dot += qs[rr * $D1 + d] * ks[jj * LDK + d];
      ss[n] = rlx_attn_score(dot, b, q_h, q_i, kb + jj, r < r_end, mask);
    }
    __syncthreads();
    for (int rr = warp; rr < RT; rr += $NT / 32) {
      $T mx = -$INF;
      for (int jj = lane; jj < BN; jj += 32) mx = rlx_max(mx, ss[rr * BN + jj]);
      for (int w = 16; w > 0; w >>= 1) mx = rlx_max(mx, __shfl_xor_sync(0xffffffffu, mx, w));
      const $T m_old = m_s[rr], m_new = rlx_max(m_old, mx), base = m_new == -$INF ? ($T)0 : m_new;
      $T sum = 0;
      for (int jj = lane; jj < BN; jj += 32) {
        const $T e = rlx_exp(ss[rr * BN + jj] - base);
        ss[rr * BN + jj] = e;
        sum += e;
      }
      for (int w = 16; w > 0; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
      if (lane == 0) {
        const $T alpha = rlx_exp(m_old - base);
        a_s[rr] = alpha; l_s[rr] = l_s[rr] * alpha + sum; m_s[rr] = m_new;
      }
    }
    __syncthreads();
    #pragma unroll
    for (int u = 0; u < OPT; ++u) {
      const int n = threadIdx.x + u * $NT;
      if (n < RT * DV) {
        const int rr = n / DV, c = n % DV;
        $T pv = 0;
        for (int jj = 0; jj < BN; ++jj) pv += ss[rr * BN + jj] * vs[jj * $DV1 + c];
        acc[u] = acc[u] * a_s[rr] + pv;
      }
    }
  }
  __syncthreads();
  #pragma unroll
  for (int u = 0; u < OPT; ++u) {
    const int n = threadIdx.x + u * $NT;
    const int rr = n / DV, c = n % DV, r = r0 + rr;
    if (n >= RT * DV || r >= r_end) continue;
    $ROW
    const $T total = l_s[rr], inv = total > 0 ? ($T)1 / total : ($T)0;
    $WRITE_ROW
    $WRITE
  }
""")


@dataclass
class DecodeAttentionKernel(_TiledAttention):
    """Attention on CUDA cores for few query rows per KV head (``decode_tile_keys`` says
    whether a block's shared memory fits); see the module docstring."""

    @property
    def block_rows(self) -> int:
        return min(self.problem.rows, DECODE_MAX_BLOCK_ROWS)

    @property
    def keys(self) -> int:
        p = self.problem
        return decode_tile_keys(p.dtype, self.block_rows, p.d, p.dv)

    def source(self) -> str:
        p = self.problem
        t, dt = p.acc, device_type(p.dtype)
        convert = f"({t}){dt.load.format('{}')}" if p.dtype in (DType.F16, DType.BF16) else f"({t})" + "{}"
        item = p.dtype.itemsize
        body = _DECODE.substitute(
            BN=self.keys, RT=self.block_rows, D=p.d, DV=p.dv, D1=max(p.d, 1), DV1=max(p.dv, 1),
            OPT=-(-self.block_rows * p.dv // ATTENTION_BLOCK), T=t, NT=ATTENTION_BLOCK,
            INF="rlx_inf_d()" if t == "double" else "rlx_inf_f()",
            COORDS=_block_coordinates(p, self.block_rows, self.splits, reverse=False),
            ROW=_query_row(p, "r", "q"),
            LOAD_Q=_load_rows("qs", max(p.d, 1), "RT", p.d, p.d, "q", p.q, p.dtype, _query_row_setup(p), convert,
                              _vectorizable(p.q, p.d, item)),
            LOAD_K=_load_rows("ks", p.d + 1, "BN", p.d, p.d, "k", p.k, p.dtype, _key_row_setup(p, p.k), convert,
                              _vectorizable(p.k, p.d, item)),
            LOAD_V=_load_rows("vs", max(p.dv, 1), "BN", p.dv, p.dv, "v", p.v, p.dtype, _key_row_setup(p, p.v),
                              convert, _vectorizable(p.v, p.dv, item)),
            **_writes(p, self.splits, "acc[u] * inv", "q_h", "q_i", "r", "c == 0",
                      f"total > 0 ? m_s[rr] + rlx_log(total) : -{'rlx_inf_d()' if t == 'double' else 'rlx_inf_f()'}"))
        params = (f"const {dt.store}* q, const {dt.store}* k, const {dt.store}* v, const {_mask_type(p)}* mask, "
                  f"{dt.store}* out, {t}* part")
        return _kernel(_V16 + _score_function(p), params, body)

    @property
    def partial_bytes(self) -> int:
        return _partial_words(self.problem, self.splits) * (8 if self.problem.acc == "double" else 4)


# --- merging key splits ----------------------------------------------------------------------------
@dataclass
class CombineKernel:
    """Merges the ``splits`` parts of every output element: the parts' normalized rows
    weighted by ``exp(lse_s - max lse)``; zeros where no part saw a key. ``acc`` is the
    partials' type. One thread per output element (grid-stride)."""

    problem: AttentionProblem
    splits: int
    acc: str

    @property
    def size(self) -> int:
        p = self.problem
        return p.heads * p.rows * p.dv

    def source(self) -> str:
        p, t = self.problem, self.acc
        inf = "rlx_inf_d()" if t == "double" else "rlx_inf_f()"
        per_split = p.heads * p.rows
        lse_at = self.splits * per_split * p.dv
        dt = device_type(p.dtype)
        body = f"""
  for (long long n = (long long)blockIdx.x * blockDim.x + threadIdx.x; n < {self.size}LL;
       n += (long long)gridDim.x * blockDim.x) {{
    const int c = (int)(n % {p.dv});
    const long long pr = n / {p.dv};
    const int r = (int)(pr % {p.rows}), bk = (int)(pr / {p.rows}), b = bk / {p.hkv}, kvh = bk % {p.hkv};
    {t} top = -{inf};
    for (int s = 0; s < {self.splits}; ++s) top = rlx_max(top, part[{lse_at}LL + s * {per_split}LL + pr]);
    {t} num = 0, den = 0;
    if (top != -{inf}) {{
      for (int s = 0; s < {self.splits}; ++s) {{
        const {t} w = rlx_exp(part[{lse_at}LL + s * {per_split}LL + pr] - top);
        den += w;
        num += w * part[(s * {per_split}LL + pr) * {p.dv} + c];
      }}
    }}
    const {t} value = den > 0 ? num / den : ({t})0;
    {_query_row(p, 'r', 'q')}
    out[{_offset(p.out, 'b', 'q_h', 'q_i')} + (long long)c * {p.out.strides[3]}LL] = {dt.to_store('value')};
  }}"""
        return _kernel("", f"const {t}* part, {dt.store}* out", body, bounds=False)

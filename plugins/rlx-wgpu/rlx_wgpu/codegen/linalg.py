"""matmul (tiled, in workgroup memory, register blocked) and dense_solve (LU).

matmul: each workgroup computes a ``BM x BN`` tile of C, stepping through K in slices of
``BK``: the A and B slices are staged in workgroup memory, each invocation accumulates a
``TM x TN`` block of C in registers (as vec4 rows), and the next slices are fetched from
global memory into registers while the current ones are multiplied. When every dim is a
multiple of its tile (and the rows of A, B, C are whole vec4s), loads and stores are
vec4 and unguarded; otherwise a guarded scalar path handles the edges. Batch dims
broadcast; (row tile, batch) pairs are spread over the grid's y and z dimensions.
16-bit floats accumulate in f32; integers wrap exactly (two's complement). The tile is
picked from the problem size (and, for large products, from calibration:
``rlx_wgpu.calibrate``), or forced with
``CompileOptions(backend={"matmul_tile": "128x128x8/8x8"})``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from rlx_core.errors import RlxError
from rlx_core.ir import DType
from rlx_core.ir.ops.linalg import solve_rhs_is_vector

from .base import KernelContext, generator
from .reduce import acc_type, row_kernel
from .wgsl import grid, ravel, shader, strides, u32, unravel

__all__ = ["Tile", "TILES", "pick_tile", "parse_tile", "matmul_source"]


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    tm: int  # rows per invocation (multiple of 4)
    tn: int  # columns per invocation (multiple of 4)

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"


TILES = {str(t): t for t in (Tile(128, 128, 8, 8, 8), Tile(128, 128, 16, 8, 8), Tile(128, 64, 8, 8, 4),
                             Tile(64, 64, 8, 4, 4), Tile(64, 64, 16, 4, 4), Tile(16, 16, 8, 4, 4))}


def parse_tile(text: str) -> Tile:
    try:
        bm, bn, bk, tm, tn = (int(v) for v in text.replace("/", "x").split("x"))
    except ValueError:
        raise RlxError(f"matmul_tile must look like '128x128x8/8x8' (BMxBNxBK/TMxTN), got {text!r}") from None
    tile = Tile(bm, bn, bk, tm, tn)
    if tm % 4 or tn % 4 or bm % tm or bn % tn or bm % 4 or bn % 4 or bk % 4 or not 0 < tile.threads <= 256:
        raise RlxError(f"matmul_tile {text!r}: TM and TN must be multiples of 4 dividing BM and BN, BK a "
                       f"multiple of 4, and (BM/TM)*(BN/TN) <= 256 invocations")
    return tile


def pick_tile(m: int, n: int, forced: str | None = None, tuned: str | None = None) -> Tile:
    """The tile for an ``m x n`` result: ``forced`` if given; for large products the one
    calibration found fastest on this adapter (``tuned``), else 128x128; smaller tiles
    for smaller products."""
    if forced:
        return parse_tile(forced)
    if m >= 512 and n >= 512:
        if tuned in TILES:
            return TILES[tuned]
        if tuned:  # a caller-supplied calibration may name any valid tile
            try:
                return parse_tile(tuned)
            except RlxError:
                pass
        return TILES["128x128x8/8x8"]
    if m >= 64 and n >= 64:
        return TILES["64x64x8/4x4"]
    return TILES["16x16x8/4x4"]


@dataclass(frozen=True)
class Problem:
    m: int
    n: int
    k: int
    batch: int
    a_batch: str  # element offset of A's matrix for batch index ``b`` (WGSL)
    b_batch: str
    dtype: DType


def _problem(k: KernelContext) -> Problem:
    a, b = k.ins
    a_dims = (1,) + a.dims if a.rank == 1 else a.dims
    b_dims = b.dims + (1,) if b.rank == 1 else b.dims
    m, kk, n = a_dims[-2], a_dims[-1], b_dims[-1]
    batch_dims = tuple(d for d in k.outs[0].dims[:len(k.outs[0].dims) - (a.rank > 1) - (b.rank > 1)])
    return Problem(m, n, kk, math.prod(batch_dims), _batch_offset(batch_dims, a_dims[:-2], m * kk),
                   _batch_offset(batch_dims, b_dims[:-2], kk * n), a.dtype)


def _batch_offset(out_batch, own_batch, matrix: int) -> str:
    """Element offset of an operand's matrix for batch ``b`` (its batch dims broadcast)."""
    lead = len(out_batch) - len(own_batch)
    st = strides(own_batch)
    per_axis = [0] * lead + [s * matrix if d != 1 else 0 for s, d in zip(st, own_batch)]
    return ravel(unravel("b", out_batch), per_axis)


@generator("matmul")
def matmul(k: KernelContext) -> None:
    p = _problem(k)
    if p.m * p.n * p.batch == 0:
        return
    tile = pick_tile(p.m, p.n, k.options.get("matmul_tile"), k.gpu.tuned_matmul_tile())
    source = matmul_source(p, tile, k.storage(p.dtype))
    x, y, _ = grid(-(-p.m // tile.bm) * p.batch, 1, k.max_grid)  # (row tile, batch) pairs over y and z
    k.emit(source, [k.input(0), k.input(1), k.output()], (-(-p.n // tile.bn), x, y))


def matmul_source(p: Problem, t: Tile, storage: str) -> str:
    """The WGSL of one matmul problem with tile ``t`` (see the module docstring)."""
    c = acc_type(p.dtype)
    vec = storage in ("f32", "i32", "u32") and p.m % t.bm == 0 and p.n % t.bn == 0 and p.k % t.bk == 0 \
        and p.k % 4 == 0 and p.n % 4 == 0
    gm, gn = t.tm // 4, t.tn // 4            # vec4 row groups / column groups per invocation
    tx_count = t.bn // t.tn
    row_step, col_step = t.bm // gm, t.bn // gn  # distance between an invocation's groups
    tiles_k = -(-p.k // t.bk)
    zero = {"f32": "0.0f", "i32": "0i", "u32": "0u"}[c]
    m_tiles = -(-p.m // t.bm)
    lines = ["let yz = wid.y + wid.z * nwg.y;", f"let b = yz / {u32(m_tiles)};",
             f"if (b >= {u32(p.batch)}) {{ return; }}",
             f"let tx = lid % {u32(tx_count)};", f"let ty = lid / {u32(tx_count)};",
             f"let m0 = (yz % {u32(m_tiles)}) * {u32(t.bm)};", f"let n0 = wid.x * {u32(t.bn)};",
             f"let a0 = {p.a_batch};", f"let b0 = {p.b_batch};", f"let c0 = b * {u32(p.m * p.n)};"]
    lines += [f"var acc_{g}_{i}_{h} = vec4<{c}>();" for g in range(gm) for i in range(4) for h in range(gn)]
    fetch, stash = _staging(p, t, vec, c, zero, storage)
    compute = []
    for kk in range(t.bk):
        compute += [f"let a{g}_{kk} = As[{u32(kk * t.bm // 4 + g * row_step // 4)} + ty];" for g in range(gm)]
        compute += [f"let b{h}_{kk} = Bs[{u32(kk * t.bn // 4 + h * col_step // 4)} + tx];" for h in range(gn)]
        compute += [_multiply_add(c, f"acc_{g}_{i}_{h}", f"a{g}_{kk}[{i}]", f"b{h}_{kk}")
                    for g in range(gm) for i in range(4) for h in range(gn)]
    if tiles_k:
        lines += fetch("0u")
        lines += [f"for (var kt = 0u; kt < {u32(tiles_k)}; kt = kt + 1u) {{", *[f"  {s}" for s in stash],
                  "  workgroupBarrier();", f"  if (kt + 1u < {u32(tiles_k)}) {{",
                  *[f"    {s}" for s in fetch(f"(kt + 1u) * {u32(t.bk)}", declare=False)], "  }",
                  *[f"  {s}" for s in compute], "  workgroupBarrier();", "}"]
    for g in range(gm):
        for i in range(4):
            row = f"m0 + {u32(g * row_step + i)} + ty * 4u"
            for h in range(gn):
                col = f"n0 + {u32(h * col_step)} + tx * 4u"
                lines += _store_c(p, vec, f"acc_{g}_{i}_{h}", row, col, storage)
    decls = (f"var<workgroup> As: array<vec4<{c}>, {t.bk * t.bm // 4}>;\n"
             f"var<workgroup> Bs: array<vec4<{c}>, {t.bk * t.bn // 4}>;\n")
    elem = f"vec4<{storage}>" if vec else storage
    return shader([("A", elem), ("B", elem), ("C", elem)], "".join(f"  {s}\n" for s in lines), t.threads, decls)


def _multiply_add(c: str, acc: str, a: str, b: str) -> str:
    """``acc += a * b`` (a scalar times a vec4): an explicit fused multiply-add for floats,
    so that drivers that do not contract a multiply and an add still issue one FMA."""
    if c == "f32":
        return f"{acc} = fma(vec4<f32>({a}), {b}, {acc});"
    return f"{acc} = {acc} + {a} * {b};"


def _staging(p: Problem, t: Tile, vec: bool, c: str, zero: str, storage: str):
    """``(fetch(k0), stash)``: lines loading the A and B slices at K offset ``k0`` into
    registers, and lines storing those registers into workgroup memory (As transposed,
    so that an invocation reads its TM rows of one k as vec4s)."""
    width = 4 if vec else 1
    a_count, b_count = t.bm * t.bk // width, t.bk * t.bn // width
    a_loads, b_loads = -(-a_count // t.threads), -(-b_count // t.threads)

    def fetch(k0: str, declare: bool = True) -> list[str]:
        out = []
        for j in range(a_loads):
            e = f"(lid + {u32(j * t.threads)})"
            row, col = f"({e} / {u32(t.bk // width)})", f"({e} % {u32(t.bk // width)})"
            out.append(_assign(declare, f"pa{j}", _load_a(p, vec, row, col, k0, c, zero, storage)))
        for j in range(b_loads):
            e = f"(lid + {u32(j * t.threads)})"
            row, col = f"({e} / {u32(t.bn // width)})", f"({e} % {u32(t.bn // width)})"
            out.append(_assign(declare, f"pb{j}", _load_b(p, vec, row, col, k0, c, zero, storage)))
        return out

    stash = []
    for j in range(a_loads):
        e = f"(lid + {u32(j * t.threads)})"
        row, col = f"({e} / {u32(t.bk // width)})", f"({e} % {u32(t.bk // width)})"
        guard = f"if ({e} < {u32(a_count)}) " if a_count % t.threads else ""
        if vec:
            stash += [f"{guard}{{ As[({col} * 4u + {u32(q)}) * {u32(t.bm // 4)} + {row} / 4u][{row} % 4u] "
                      f"= pa{j}[{q}]; }}" for q in range(4)]
        else:
            stash.append(f"{guard}{{ As[{col} * {u32(t.bm // 4)} + {row} / 4u][{row} % 4u] = pa{j}; }}")
    for j in range(b_loads):
        e = f"(lid + {u32(j * t.threads)})"
        row, col = f"({e} / {u32(t.bn // width)})", f"({e} % {u32(t.bn // width)})"
        guard = f"if ({e} < {u32(b_count)}) " if b_count % t.threads else ""
        if vec:
            stash.append(f"{guard}{{ Bs[{row} * {u32(t.bn // 4)} + {col}] = pb{j}; }}")
        else:
            stash.append(f"{guard}{{ Bs[{row} * {u32(t.bn // 4)} + {col} / 4u][{col} % 4u] = pb{j}; }}")
    return fetch, stash


def _assign(declare: bool, name: str, value: str) -> str:
    return f"var {name} = {value};" if declare else f"{name} = {value};"


def _convert(c: str, storage: str, value: str) -> str:
    return value if storage == c else f"{c}({value})"


def _load_a(p, vec, row, col, k0, c, zero, storage) -> str:
    """Element (``row``, ``col``) of the A slice at K offset ``k0`` (a vec4 along K when
    ``vec``); zero outside the matrix. (Reads past a binding are harmless in WebGPU.)"""
    if vec:
        return f"A[(a0 + (m0 + {row}) * {u32(p.k)} + {k0}) / 4u + {col}]"
    r, kk = f"(m0 + {row})", f"({k0} + {col})"
    value = _convert(c, storage, f"A[a0 + {r} * {u32(p.k)} + {kk}]")
    return f"select({zero}, {value}, {r} < {u32(p.m)} && {kk} < {u32(p.k)})"


def _load_b(p, vec, row, col, k0, c, zero, storage) -> str:
    if vec:
        return f"B[(b0 + ({k0} + {row}) * {u32(p.n)}) / 4u + n0 / 4u + {col}]"
    kk, cc = f"({k0} + {row})", f"(n0 + {col})"
    value = _convert(c, storage, f"B[b0 + {kk} * {u32(p.n)} + {cc}]")
    return f"select({zero}, {value}, {kk} < {u32(p.k)} && {cc} < {u32(p.n)})"


def _store_c(p: Problem, vec: bool, acc: str, row: str, col: str, storage: str) -> list[str]:
    if vec:
        return [f"C[(c0 + ({row}) * {u32(p.n)} + {col}) / 4u] = {acc};"]
    out = []
    for q in range(4):
        value = acc + f"[{q}]"
        value = value if storage == acc_type(p.dtype) else f"{storage}({value})"
        out.append(f"if (({row}) < {u32(p.m)} && ({col} + {u32(q)}) < {u32(p.n)}) "
                   f"{{ C[c0 + ({row}) * {u32(p.n)} + {col} + {u32(q)}] = {value}; }}")
    return out


@generator("dense_solve")
def dense_solve(k: KernelContext) -> None:
    """One workgroup per system: Gaussian elimination with partial pivoting (LU, as LAPACK's
    gesv) on a scratch copy of A, applied to the right-hand sides in the output, then back
    substitution. A singular system gives inf/nan (the op leaves it undefined)."""
    a, b = k.ins
    n, rhs, batch, a_at, b_at = _solve_layout(a.dims, b.dims, k.outs[0].dims)
    if n == 0 or batch == 0:
        return
    wg = 64
    work, factors = k.scratch(4 * batch * n * n), k.scratch(4 * batch * n)
    width = "(n - col - 1u)"
    lines = [
        f"let n = {u32(n)};", f"let w0 = row * {u32(n * n)};", f"let x0 = row * {u32(n * rhs)};",
        "let f0 = row * n;", "let b = row;", f"let a0 = {a_at};", f"let b0 = {b_at};",
        f"for (var e = lid; e < {u32(n * n)}; e = e + {u32(wg)}) {{ W[w0 + e] = A[a0 + e]; }}",
        f"for (var e = lid; e < {u32(n * rhs)}; e = e + {u32(wg)}) {{ X[x0 + e] = B[b0 + e]; }}",
        "storageBarrier();",
        "for (var col = 0u; col < n; col = col + 1u) {",
        "  if (lid == 0u) {",
        "    var best = col;",
        "    for (var r = col + 1u; r < n; r = r + 1u) {",
        "      if (abs(W[w0 + r * n + col]) > abs(W[w0 + best * n + col])) { best = r; }",
        "    }",
        "    pivot = best;",
        "  }",
        "  workgroupBarrier();",
        "  let p = pivot;",
        "  if (p != col) {",
        f"    for (var c = lid; c < n; c = c + {u32(wg)}) {{",
        "      let t = W[w0 + col * n + c]; W[w0 + col * n + c] = W[w0 + p * n + c]; W[w0 + p * n + c] = t;",
        "    }",
        f"    for (var c = lid; c < {u32(rhs)}; c = c + {u32(wg)}) {{",
        f"      let t = X[x0 + col * {u32(rhs)} + c]; X[x0 + col * {u32(rhs)} + c] = X[x0 + p * {u32(rhs)} + c];",
        f"      X[x0 + p * {u32(rhs)} + c] = t;",
        "    }",
        "  }",
        "  storageBarrier();",
        "  let d = W[w0 + col * n + col];",
        f"  for (var r = col + 1u + lid; r < n; r = r + {u32(wg)}) {{ F[f0 + r] = W[w0 + r * n + col] / d; }}",
        "  storageBarrier();",
        f"  let width = {width} + {u32(rhs)};",
        f"  for (var e = lid; e < {width} * width; e = e + {u32(wg)}) {{",
        "    let r = col + 1u + e / width;",
        "    let c = e % width;",
        f"    if (c < {width}) {{ W[w0 + r * n + col + 1u + c] -= F[f0 + r] * W[w0 + col * n + col + 1u + c]; }}",
        f"    else {{ let q = c - {width}; X[x0 + r * {u32(rhs)} + q] -= F[f0 + r] * X[x0 + col * {u32(rhs)} + q]; }}",
        "  }",
        "  storageBarrier();",
        "}",
        "for (var step = n; step > 0u; step = step - 1u) {",
        "  let r = step - 1u;",
        f"  for (var c = lid; c < {u32(rhs)}; c = c + {u32(wg)}) {{",
        f"    var acc = X[x0 + r * {u32(rhs)} + c];",
        f"    for (var j = r + 1u; j < n; j = j + 1u) {{ acc -= W[w0 + r * n + j] * X[x0 + j * {u32(rhs)} + c]; }}",
        f"    X[x0 + r * {u32(rhs)} + c] = acc / W[w0 + r * n + r];",
        "  }",
        "  storageBarrier();",
        "}",
    ]
    row_kernel(k, batch, wg, [("A", "f32"), ("B", "f32"), ("W", "f32"), ("F", "f32"), ("X", "f32")],
               [k.input(0), k.input(1), work, factors, k.output()], "var<workgroup> pivot: u32;\n", lines)


def _solve_layout(a_dims, b_dims, x_dims):
    """``(N, right-hand sides, systems, A offset(b), B offset(b))`` of a dense_solve."""
    n = a_dims[-1]
    vector = solve_rhs_is_vector(a_dims, b_dims)
    rhs = 1 if vector else b_dims[-1]
    b_batch, x_batch = (b_dims[:-1], x_dims[:-1]) if vector else (b_dims[:-2], x_dims[:-2])
    return (n, rhs, math.prod(x_batch), _batch_offset(x_batch, a_dims[:-2], n * n),
            _batch_offset(x_batch, b_batch, n * rhs))

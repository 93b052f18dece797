"""matmul (tiled, in workgroup memory, register blocked) and dense_solve (LU).

matmul: each workgroup of ``(BM/TM) x (BN/TN)`` invocations computes a ``BM x BN`` tile
of C, stepping through K in slices of ``BK`` staged in workgroup memory: A's slice
transposed (``As[k][row / 4]``, vec4s of 4 rows) and B's as it is (``Bs[k][col / 4]``).
Each invocation accumulates a ``TM x TN`` block of C in vec4 registers: rows
``g * 4 * LY + ty * 4 + (0..3)`` and columns ``h * 4 * LX + tx * 4 + (0..3)`` (``LX``,
``LY``: invocations per row and column), so that one step of k reads ``TM/4 + TN/4``
vec4s (neighbouring invocations read neighbouring vec4s: no bank conflicts) for
``TM * TN`` fused multiply-adds; the k steps are unrolled with every offset a constant,
and the workgroup arrays are nested (``[buffer][k][vec4]``) so that the one dynamic index
of a read is loop-invariant (naga's bounds clamp on it is computed once, not per read).
The next slice is fetched from global memory into registers while the current one is
multiplied. Options, in the tile's name ``BMxBNxBK/TMxTN[/db][/p][/wX]``:

* ``/db``: two workgroup buffers, the fetched slice stored into the other one: one
  barrier per slice instead of two;
* ``/p``: each k of As padded by one vec4, so that the transposing stores of neighbouring
  invocations (4 rows' k, k+4, k+8, ...) fall into different banks;
* ``/wX``: each 32-invocation subgroup covers ``X x 32/X`` invocations of the tile (e.g.
  8x4) instead of ``LX`` columns of consecutive rows, so that its reads touch fewer
  distinct vec4s of As and Bs.

When K and N are multiples of 4, global loads and stores are vec4; when the problem is
also a multiple of the tile in every dim they are unguarded, else each vec4 is guarded
(zero outside). Other shapes (and 16-bit floats) load and store element by element.
Batch dims broadcast; (row tile, batch) pairs are spread over the grid's y and z
dimensions. 16-bit floats accumulate in f32; integers wrap exactly (two's complement).
The tile is picked from the problem size (and, for large products, from calibration:
``rlx_wgpu.calibrate``), or forced with
``CompileOptions(backend={"matmul_tile": "128x128x16/8x8/db"})``.
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

__all__ = ["Tile", "TILES", "DEFAULT_TILES", "pick_tile", "parse_tile", "matmul_source"]

SUBGROUP = 32  # invocations a /wX tile arranges as X x 32/X (NVIDIA's warp; any size is correct)


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int
    tm: int  # rows per invocation (multiple of 4)
    tn: int  # columns per invocation (multiple of 4)
    db: bool = False  # double-buffered workgroup tiles
    pad: bool = False  # As padded by one vec4 per k
    warp: int = 0     # /wX: columns of invocations per subgroup (0: whole rows of the tile)

    @property
    def lx(self) -> int:
        return self.bn // self.tn

    @property
    def ly(self) -> int:
        return self.bm // self.tm

    @property
    def threads(self) -> int:
        return self.lx * self.ly

    @property
    def workgroup_bytes(self) -> int:
        """Workgroup memory of the A and B slices (4-byte accumulator elements)."""
        return (2 if self.db else 1) * self.bk * (self.bm + 4 * self.pad + self.bn) * 4

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}" + ("/db" if self.db else "")
                + ("/p" if self.pad else "") + (f"/w{self.warp}" if self.warp else ""))


def parse_tile(text: str) -> Tile:
    try:
        shape, micro, *opts = str(text).split("/")
        bm, bn, bk = (int(v) for v in shape.split("x"))
        tm, tn = (int(v) for v in micro.split("x"))
        if any(o not in ("db", "p") and not (o[:1] == "w" and o[1:].isdigit()) for o in opts) \
                or len({o[0] for o in opts}) < len(opts):
            raise ValueError
        warp = next((int(o[1:]) for o in opts if o[0] == "w"), 0)
    except ValueError:
        raise RlxError(f"matmul_tile must look like '128x128x16/8x8' (BMxBNxBK/TMxTN, then '/db' for double "
                       f"buffering, '/p' for a padded A tile and '/w8' for 8x4 subgroups, optional), "
                       f"got {text!r}") from None
    tile = Tile(bm, bn, bk, tm, tn, "db" in opts, "p" in opts, warp)
    if min(bm, bn, bk, tm, tn) < 1 or tm % 4 or tn % 4 or bm % tm or bn % tn or bk % 4 \
            or not 0 < tile.threads <= 256:
        raise RlxError(f"matmul_tile {text!r}: TM and TN must be multiples of 4 dividing BM and BN, BK a "
                       f"multiple of 4, and (BM/TM)*(BN/TN) <= 256 invocations")
    if warp and (SUBGROUP % warp or tile.lx % warp or tile.ly % (SUBGROUP // warp) or tile.threads % SUBGROUP):
        raise RlxError(f"matmul_tile {text!r}: /w{warp} needs X dividing {SUBGROUP} and BN/TN, {SUBGROUP}/X "
                       f"dividing BM/TM, and a multiple of {SUBGROUP} invocations")
    return tile


TILES = {str(t): t for t in map(parse_tile, (
    "128x128x8/8x8", "128x128x16/8x8", "128x128x8/8x8/db", "128x128x16/8x8/db", "128x128x8/8x8/db/w8",
    "128x128x16/8x8/db/w8", "128x128x8/8x8/db/p", "128x64x16/8x4/db", "64x128x16/4x8/db", "64x64x16/4x4/db", "64x64x8/4x4/db",
    "128x128x32/8x8", "128x128x16/8x8/w8", "256x128x16/16x8", "64x64x8/4x4", "16x16x8/4x4"))}
DEFAULT_TILES = ("128x128x8/8x8/db",)  # large products without a calibration: the first that fits


def pick_tile(m: int, n: int, forced: str | None = None, tuned: str | None = None,
              workgroup_bytes: int | None = None) -> Tile:
    """The tile for an ``m x n`` result: ``forced`` if given; for large products the one
    calibration found fastest on this adapter (``tuned``), else the first of :data:`DEFAULT_TILES`;
    smaller tiles for smaller products. A tuned tile needing more workgroup memory than
    ``workgroup_bytes`` (the device's limit) is passed over; a forced one is an error."""
    if forced:
        tile = parse_tile(forced)
        if workgroup_bytes is not None and tile.workgroup_bytes > workgroup_bytes:
            raise RlxError(f"matmul_tile {forced!r} needs {tile.workgroup_bytes} bytes of workgroup memory; "
                           f"this device allows {workgroup_bytes}")
        return tile
    if m >= 512 and n >= 512:
        try:
            tile = parse_tile(tuned) if tuned else None  # a caller-supplied calibration may name any valid tile
        except RlxError:
            tile = None
        fits = [t for t in [tile, *map(parse_tile, DEFAULT_TILES)]
                if t and (workgroup_bytes is None or t.workgroup_bytes <= workgroup_bytes)]
        return fits[0] if fits else TILES["64x64x8/4x4"]
    if m >= 64 and n >= 64:
        return TILES["64x64x8/4x4/db"]
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
    tile = pick_tile(p.m, p.n, k.options.get("matmul_tile"), k.gpu.tuned_matmul_tile(), k.gpu.workgroup_bytes)
    source = matmul_source(p, tile, k.storage(p.dtype))
    x, y, _ = grid(-(-p.m // tile.bm) * p.batch, 1, k.max_grid)  # (row tile, batch) pairs over y and z
    k.emit(source, [k.input(0), k.input(1), k.output()], (-(-p.n // tile.bn), x, y))


def matmul_source(p: Problem, t: Tile, storage: str) -> str:
    """The WGSL of one matmul problem with tile ``t`` (see the module docstring)."""
    c = acc_type(p.dtype)
    vec = storage in ("f32", "i32", "u32") and p.k % 4 == 0 and p.n % 4 == 0
    exact = p.m % t.bm == 0 and p.n % t.bn == 0 and p.k % t.bk == 0
    gm, gn = t.tm // 4, t.tn // 4
    tiles_k = -(-p.k // t.bk)
    zero = {"f32": "0.0f", "i32": "0i", "u32": "0u"}[c]
    m_tiles = -(-p.m // t.bm)
    lines = ["let yz = wid.y + wid.z * nwg.y;", f"let b = yz / {u32(m_tiles)};",
             f"if (b >= {u32(p.batch)}) {{ return; }}", *_invocation(t),
             f"let m0 = (yz % {u32(m_tiles)}) * {u32(t.bm)};", f"let n0 = wid.x * {u32(t.bn)};",
             f"let a0 = {p.a_batch};", f"let b0 = {p.b_batch};", f"let c0 = b * {u32(p.m * p.n)};"]
    lines += [f"var acc_{g}_{i}_{h} = vec4<{c}>();" for g in range(gm) for i in range(4) for h in range(gn)]
    fetch, stash = _staging(p, t, vec, exact, c, zero, storage)

    def compute(buf: str) -> list[str]:
        out = []
        for kk in range(t.bk):
            out += [f"let a{g}_{kk} = As[{buf}][{u32(kk)}][{u32(g * t.ly)} + ty];" for g in range(gm)]
            out += [f"let b{h}_{kk} = Bs[{buf}][{u32(kk)}][{u32(h * t.lx)} + tx];" for h in range(gn)]
            out += [_multiply_add(c, f"acc_{g}_{i}_{h}", f"a{g}_{kk}[{i}]", f"b{h}_{kk}")
                    for g in range(gm) for i in range(4) for h in range(gn)]
        return out

    def block(head: str, body: list[str]) -> list[str]:
        return [f"{head} {{", *[f"  {s}" for s in body], "}"]

    if tiles_k:
        lines += fetch("0u")
        next_k = fetch(f"(kt + 1u) * {u32(t.bk)}", declare=False)
        more = f"if (kt + 1u < {u32(tiles_k)})"
        if t.db:  # stash slice 0; then multiply buffer kt % 2 while slice kt + 1 goes to the other one
            lines += stash("0u") + ["workgroupBarrier();"]
            body = ["let cur = kt & 1u;", *block(more, next_k), *compute("cur"),
                    *block(more, stash("cur ^ 1u")), "workgroupBarrier();"]
        else:
            body = [*stash("0u"), "workgroupBarrier();", *block(more, next_k), *compute("0u"), "workgroupBarrier();"]
        lines += block(f"for (var kt = 0u; kt < {u32(tiles_k)}; kt = kt + 1u)", body)
    for g in range(gm):
        for i in range(4):
            row = f"m0 + {u32(g * 4 * t.ly + i)} + ty * 4u"
            for h in range(gn):
                col = f"n0 + {u32(h * 4 * t.lx)} + tx * 4u"
                lines += _store_c(p, vec, exact, f"acc_{g}_{i}_{h}", row, col, storage)
    buffers = 2 if t.db else 1
    decls = (f"var<workgroup> As: array<array<array<vec4<{c}>, {t.bm // 4 + t.pad}>, {t.bk}>, {buffers}>;\n"
             f"var<workgroup> Bs: array<array<array<vec4<{c}>, {t.bn // 4}>, {t.bk}>, {buffers}>;\n")
    elem = f"vec4<{storage}>" if vec else storage
    return shader([("A", elem), ("B", elem), ("C", elem)], "".join(f"  {s}\n" for s in lines), t.threads, decls)


def _invocation(t: Tile) -> list[str]:
    """``tx``, ``ty``: the invocation's column and row in the tile's ``LX x LY`` grid, by
    whole rows of invocations, or by ``X x 32/X`` blocks per subgroup (``/wX``)."""
    if not t.warp:
        return [f"let tx = lid % {u32(t.lx)};", f"let ty = lid / {u32(t.lx)};"]
    across, rows = t.lx // t.warp, SUBGROUP // t.warp
    return [f"let sg = lid / {u32(SUBGROUP)};", f"let sl = lid % {u32(SUBGROUP)};",
            f"let tx = (sg % {u32(across)}) * {u32(t.warp)} + sl % {u32(t.warp)};",
            f"let ty = (sg / {u32(across)}) * {u32(rows)} + sl / {u32(t.warp)};"]


def _multiply_add(c: str, acc: str, a: str, b: str) -> str:
    """``acc += a * b`` (a scalar times a vec4): an explicit fused multiply-add for floats,
    so that drivers that do not contract a multiply and an add still issue one FMA."""
    if c == "f32":
        return f"{acc} = fma(vec4<f32>({a}), {b}, {acc});"
    return f"{acc} = {acc} + {a} * {b};"


def _staging(p: Problem, t: Tile, vec: bool, exact: bool, c: str, zero: str, storage: str):
    """``(fetch(k0, declare=True), stash(buf))``: lines loading the A and B slices at K
    offset ``k0`` into registers, and lines storing those registers into workgroup buffer
    ``buf`` (As transposed, so that an invocation reads 4 rows of one k as a vec4)."""
    width = 4 if vec else 1
    a_count, b_count = t.bm * t.bk // width, t.bk * t.bn // width
    a_loads, b_loads = -(-a_count // t.threads), -(-b_count // t.threads)

    def places(j: int, per_row: int) -> tuple[str, str, str]:
        e = f"(lid + {u32(j * t.threads)})"
        return e, f"({e} / {u32(per_row)})", f"({e} % {u32(per_row)})"

    def fetch(k0: str, declare: bool = True) -> list[str]:
        out = []
        for j in range(a_loads):
            _, row, col = places(j, t.bk // width)
            out.append(_assign(declare, f"pa{j}", _load_a(p, vec, exact, row, col, k0, c, zero, storage)))
        for j in range(b_loads):
            _, row, col = places(j, t.bn // width)
            out.append(_assign(declare, f"pb{j}", _load_b(p, vec, exact, row, col, k0, c, zero, storage)))
        return out

    def stash(buf: str) -> list[str]:
        out = []
        for j in range(a_loads):
            e, row, col = places(j, t.bk // width)
            guard = f"if ({e} < {u32(a_count)}) " if a_count % t.threads else ""
            if vec:
                out += [f"{guard}{{ As[{buf}][{col} * 4u + {u32(q)}][{row} / 4u][{row} % 4u] = pa{j}[{q}]; }}"
                        for q in range(4)]
            else:
                out.append(f"{guard}{{ As[{buf}][{col}][{row} / 4u][{row} % 4u] = pa{j}; }}")
        for j in range(b_loads):
            e, row, col = places(j, t.bn // width)
            guard = f"if ({e} < {u32(b_count)}) " if b_count % t.threads else ""
            target = f"Bs[{buf}][{row}][{col}]" if vec else f"Bs[{buf}][{row}][{col} / 4u][{col} % 4u]"
            out.append(f"{guard}{{ {target} = pb{j}; }}")
        return out
    return fetch, stash


def _assign(declare: bool, name: str, value: str) -> str:
    return f"var {name} = {value};" if declare else f"{name} = {value};"


def _convert(c: str, storage: str, value: str) -> str:
    return value if storage == c else f"{c}({value})"


def _guarded(value: str, inside: str, zero: str) -> str:
    """``value`` where ``inside`` holds, else ``zero``. (The read itself may be out of its
    binding: WebGPU makes such reads harmless.)"""
    return f"select({zero}, {value}, {inside})"


def _load_a(p, vec, exact, row, col, k0, c, zero, storage) -> str:
    """Element (``row``, ``col``) of the A slice at K offset ``k0`` (a vec4 along K when
    ``vec``); zero outside the matrix unless the problem is ``exact`` (a tile multiple)."""
    r = f"(m0 + {row})"
    if vec:
        value = f"A[(a0 + {r} * {u32(p.k)} + {k0}) / 4u + {col}]"
        return value if exact else _guarded(value, f"{r} < {u32(p.m)} && {k0} + {col} * 4u < {u32(p.k)}",
                                            f"vec4<{c}>()")
    kk = f"({k0} + {col})"
    value = _convert(c, storage, f"A[a0 + {r} * {u32(p.k)} + {kk}]")
    return _guarded(value, f"{r} < {u32(p.m)} && {kk} < {u32(p.k)}", zero)


def _load_b(p, vec, exact, row, col, k0, c, zero, storage) -> str:
    kk = f"({k0} + {row})"
    if vec:
        value = f"B[(b0 + {kk} * {u32(p.n)}) / 4u + n0 / 4u + {col}]"
        return value if exact else _guarded(value, f"{kk} < {u32(p.k)} && n0 + {col} * 4u < {u32(p.n)}",
                                            f"vec4<{c}>()")
    cc = f"(n0 + {col})"
    value = _convert(c, storage, f"B[b0 + {kk} * {u32(p.n)} + {cc}]")
    return _guarded(value, f"{kk} < {u32(p.k)} && {cc} < {u32(p.n)}", zero)


def _store_c(p: Problem, vec: bool, exact: bool, acc: str, row: str, col: str, storage: str) -> list[str]:
    if vec:
        store = f"C[(c0 + ({row}) * {u32(p.n)} + {col}) / 4u] = {acc};"
        return [store if exact else f"if (({row}) < {u32(p.m)} && ({col}) < {u32(p.n)}) {{ {store} }}"]
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

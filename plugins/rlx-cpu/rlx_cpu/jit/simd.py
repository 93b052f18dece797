"""Explicit float32 SIMD vectors for numba kernels, and the register-tiled convolution
written with them.

Why explicit vectors: a convolution reaches the FMA units' peak only when a tile of
outputs stays in registers over the whole reduction. Written with scalars, such a tile
is 100-200 loop-carried variables: LLVM's loop vectorizer cannot form the tile, numba
leaves its SLP vectorizer off, and numba's own front end (SSA reconstruction, typing)
then takes 5-20 s per kernel. Here a tile is a dozen ``f32x16`` values -- LLVM
``<16 x float>``, one zmm register with AVX-512, two ymm with AVX2 -- so the kernel
compiles in well under a second and its FMAs are vector FMAs whatever the vectorizers
decide. Loads and stores go through raw element pointers (no negative-index wrap
checks) and trust the caller's bounds, like the rest of the generated kernels.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ["LANES", "f32x16", "vzero", "vload", "vstore", "vload_lanes", "vstore_first", "vbroadcast", "vfma",
           "vadd", "vrelu",
           "tiled_conv_source", "rows_conv_source"]

LANES = 16
_VEC = ir.VectorType(ir.FloatType(), LANES)
_INDEX = ir.IntType(32)


class F32x16(types.Type):
    """numba's type of a ``<16 x float>`` value."""

    def __init__(self):
        super().__init__(name="f32x16")


f32x16 = F32x16()


@register_model(F32x16)
class _VectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VEC)


def _element(context, builder, array_type, array, index):
    """Pointer to element ``index`` of the flat C-contiguous ``array``."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def vzero(typingctx):
    """Sixteen zeros."""
    def codegen(context, builder, signature, args):
        return ir.Constant(_VEC, [0.0] * LANES)
    return f32x16(), codegen


@intrinsic
def vload(typingctx, array, index):
    """``array[index:index + 16]`` of a flat float32 array (unaligned load)."""
    def codegen(context, builder, signature, args):
        ptr = builder.bitcast(_element(context, builder, signature.args[0], *args), _VEC.as_pointer())
        return builder.load(ptr, align=4)
    return f32x16(array, index), codegen


@intrinsic
def vstore(typingctx, array, index, value):
    """``array[index:index + 16] = value`` of a flat float32 array (unaligned store)."""
    def codegen(context, builder, signature, args):
        ptr = builder.bitcast(_element(context, builder, signature.args[0], args[0], args[1]), _VEC.as_pointer())
        builder.store(args[2], ptr, align=4)
        return context.get_dummy_value()
    return types.none(array, index, value), codegen


def _splat(builder, value):
    """``value`` (an integer) in 16 i64 lanes."""
    wide = builder.sext(value, ir.IntType(64)) if value.type.width < 64 else value
    vector = ir.VectorType(ir.IntType(64), LANES)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), wide, ir.Constant(_INDEX, 0))
    return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(_INDEX, LANES), [0] * LANES))


def _mask(builder, lo, hi):
    """``<16 x i1>``: lanes ``lo <= lane < hi``."""
    lanes = ir.Constant(ir.VectorType(ir.IntType(64), LANES), list(range(LANES)))
    return builder.and_(builder.icmp_signed(">=", lanes, _splat(builder, lo)),
                        builder.icmp_signed("<", lanes, _splat(builder, hi)))


@intrinsic
def vload_lanes(typingctx, array, index, lo, hi):
    """``array[index + lane]`` in lanes ``lo <= lane < hi``, 0 in the others: a masked
    load, which touches no other element (``index`` itself may lie outside ``array``:
    a conv's padding is read as these zeros)."""
    def codegen(context, builder, signature, args):
        ptr = builder.bitcast(_element(context, builder, signature.args[0], args[0], args[1]), _VEC.as_pointer())
        load = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_VEC, [_VEC.as_pointer(), ir.IntType(32), _mask_type(), _VEC]),
            "llvm.masked.load.v16f32.p0")
        return builder.call(load, [ptr, ir.Constant(ir.IntType(32), 4), _mask(builder, args[2], args[3]),
                                   ir.Constant(_VEC, [0.0] * LANES)])
    return f32x16(array, index, lo, hi), codegen


@intrinsic
def vstore_first(typingctx, array, index, value, count):
    """``array[index:index + count] = value[:count]`` (a masked store)."""
    def codegen(context, builder, signature, args):
        ptr = builder.bitcast(_element(context, builder, signature.args[0], args[0], args[1]), _VEC.as_pointer())
        store = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_VEC, _VEC.as_pointer(), ir.IntType(32), _mask_type()]),
            "llvm.masked.store.v16f32.p0")
        builder.call(store, [args[2], ptr, ir.Constant(ir.IntType(32), 4),
                             _mask(builder, ir.Constant(ir.IntType(64), 0), args[3])])
        return context.get_dummy_value()
    return types.none(array, index, value, count), codegen


def _mask_type():
    return ir.VectorType(ir.IntType(1), LANES)


@intrinsic
def vbroadcast(typingctx, array, index):
    """``array[index]`` in all 16 lanes (one broadcast load)."""
    def codegen(context, builder, signature, args):
        scalar = builder.load(_element(context, builder, signature.args[0], *args), align=4)
        one = builder.insert_element(ir.Constant(_VEC, ir.Undefined), scalar, ir.Constant(_INDEX, 0))
        return builder.shuffle_vector(one, ir.Constant(_VEC, ir.Undefined),
                                      ir.Constant(ir.VectorType(_INDEX, LANES), [0] * LANES))
    return f32x16(array, index), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """``a * b + c``, fused."""
    def codegen(context, builder, signature, args):
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC] * 3), "llvm.fma.v16f32")
        return builder.call(fma, args)
    return f32x16(f32x16, f32x16, f32x16), codegen


@intrinsic
def vadd(typingctx, a, b):
    """``a + b``."""
    def codegen(context, builder, signature, args):
        return builder.fadd(*args)
    return f32x16(f32x16, f32x16), codegen


@intrinsic
def vrelu(typingctx, a):
    """``max(a, 0)`` as the reference computes it: NaN stays NaN (LLVM's ``maxnum``
    would give 0)."""
    def codegen(context, builder, signature, args):
        zero = ir.Constant(_VEC, [0.0] * LANES)
        return builder.select(builder.fcmp_unordered(">", args[0], zero), args[0], zero)
    return f32x16(f32x16), codegen


_HEADER = '''"""Generated by rlx_cpu.jit.simd -- do not edit (the file name hashes this text). simd v4"""
from numba import njit, prange
from rlx_cpu.jit.simd import vadd, vbroadcast, vfma, vload, vload_lanes, vrelu, vstore, vstore_first, vzero

'''


def _tile(blocks: int, positions: int, indent: str) -> list[str]:
    """The statements computing one tile of ``blocks`` x 16 output channels by
    ``positions`` consecutive output columns at ``(oh, ow0)``, into the channels-last
    result: accumulators in registers over every tap and input channel."""
    acc = [[f"a{b}_{p}" for p in range(positions)] for b in range(blocks)]
    lines = [f"{a} = vzero()" for row in acc for a in row]
    lines += ["for kh in range(kh_n):",
              "    for kw in range(kw_n):",
              "        xo = (oh * sh + kh * dh) * width + ow0 * sw + kw * dw",
              "        wo = ((cob0 * kh_n + kh) * kw_n + kw) * c_n * 16",
              "        for c in range(c_n):"]
    body = [f"w{b} = vload(wf, wo + {b} * block + c * 16)" for b in range(blocks)]
    for p in range(positions):
        body.append(f"x{p} = vbroadcast(xf, xo + c * plane + {p} * sw)")
        body += [f"{acc[b][p]} = vfma(x{p}, w{b}, {acc[b][p]})" for b in range(blocks)]
    lines += ["            " + line for line in body]
    lines += [f"vstore(yf, (oh * wo_n + ow0 + {p}) * cop + (cob0 + {b}) * 16, {acc[b][p]})"
              for b in range(blocks) for p in range(positions)]
    return [indent + line for line in lines]


def tiled_conv_source(blocks: int, positions: int, tail: int = 0) -> str:
    """``kernel(xp, wp, y, sh, sw, dh, dw)``: the convolution of one padded image
    ``xp [C, Hp, Wp]`` with packed weights ``wp [Co/16, kh, kw, C, 16]`` into the
    channels-last ``y [Ho, Wo, Co/16 * 16]``, ``y[oh, ow, co] = sum over c, i, j of
    wp[co // 16, i, j, c, co % 16] * xp[c, oh*sh + i*dh, ow*sw + j*dw]``.

    Tiles of ``blocks`` x 16 channels by ``positions`` columns (register accumulators);
    the ``tail`` columns of a row left over (``Wo % positions``, known when generating:
    a tile of one column is several times slower per FMA) and the channel blocks left
    over (``Co/16 % blocks``) run as narrower tiles."""
    lines = ['@njit(cache=True, nogil=True, error_model="numpy")',
             "def kernel(xp, wp, y, sh, sw, dh, dw):",
             "    c_n, height, width = xp.shape",
             "    cob_n, kh_n, kw_n = wp.shape[0], wp.shape[1], wp.shape[2]",
             "    ho, wo_n, cop = y.shape",
             "    xf, wf, yf = xp.reshape(-1), wp.reshape(-1), y.reshape(-1)",
             "    plane = height * width",
             "    block = kh_n * kw_n * c_n * 16",
             f"    full_w = wo_n - {tail}",
             f"    full_c = cob_n - cob_n % {blocks}"]
    loops = [("0", "full_c", blocks)] + ([("full_c", "cob_n", 1)] if blocks > 1 else [])
    for first, last, b in loops:
        lines += [f"    for cob0 in range({first}, {last}, {b}):",
                  "        for oh in range(ho):",
                  f"            for ow0 in range(0, full_w, {positions}):"]
        lines += _tile(b, positions, " " * 16)
        if tail:
            lines += ["            ow0 = full_w"]
            lines += _tile(b, tail, " " * 12)
    return _HEADER + "\n".join(lines) + "\n"


def rows_conv_source(channels: int, rows: int, relu: bool = False) -> str:
    """``kernel(x, wp, y, sh, dh, dw, top, left, first, last, b)``: the convolution of one
    image ``x [C, H, W]`` with packed weights ``wp [ceil(Co/channels), kh, kw, C,
    channels]`` into the NCHW ``y [Co, Ho, Wo]`` (unit column stride), for the output
    channel blocks ``first <= co // channels < last``: ``y[co, oh, ow] = sum over c, i, j
    of wp[co // channels, i, j, c, co % channels] * x[c, oh*sh + i*dh - top, ow + j*dw -
    left]``, elements outside ``x`` (the padding) read as 0.

    Vectorized along the output row instead of the channels: a tile is ``channels``
    output channels by ``rows`` output rows by 16 columns, input rows loaded as vectors
    (masked: the lanes in the padding and past the row's end are zeros, not loads, so no
    padded copy is made) and weights broadcast; the result needs no transposition.
    The module's ``kernel_threads`` (the same arguments, and ``parts``, at most ``last -
    first``) splits the channel blocks into ``parts`` runs on numba's threads (``prange``
    over calls of ``kernel``: 0.6 s to compile where a ``prange`` in the kernel itself
    took 1.5; ``numba.get_num_threads()`` called inside would keep it out of the disk
    cache). The bias ``b[co]`` (zeros for a conv without one: one kernel fewer to compile) is added
    and, with ``relu``, a ReLU applied as the results are stored (the epilogue of a conv +
    bias + relu step, applied by the thread that computed them)."""
    acc = [[f"a{j}_{r}" for r in range(rows)] for j in range(channels)]
    tile = [f"{a} = vzero()" for row in acc for a in row]
    tile += ["for kh in range(kh_n):"]
    for r in range(rows):  # a row in the padding loads no lane
        tile += [f"    ih{r} = (oh + {r}) * sh + kh * dh - top",
                 f"    inside{r} = 0 <= ih{r} < height"]
    tile += ["    for kw in range(kw_n):",
             "        iw = ow0 + kw * dw - left",
             "        lo, hi = max(0, -iw), min(n, width - iw)",
             f"        wo = ((cob * kh_n + kh) * kw_n + kw) * c_n * {channels}"]
    tile += [f"        xo{r}, hi{r} = ih{r} * width + iw, hi if inside{r} else 0" for r in range(rows)]
    tile += ["        for c in range(c_n):"]
    body = [f"x{r} = vload_lanes(xf, xo{r} + c * plane, lo, hi{r})" for r in range(rows)]
    for j in range(channels):
        body.append(f"w{j} = vbroadcast(wf, wo + c * {channels} + {j})")
        body += [f"{acc[j][r]} = vfma(x{r}, w{j}, {acc[j][r]})" for r in range(rows)]
    tile += ["            " + line for line in body]
    for j in range(channels):
        co = f"cob * {channels} + {j}"
        tile.append(f"if {co} < co_n:")
        tile.append(f"    bj = vbroadcast(b, {co})")
        for r in range(rows):
            value = f"vadd({acc[j][r]}, bj)"
            value = f"vrelu({value})" if relu else value
            tile.append(f"    vstore_first(yf, (({co}) * ho + oh + {r}) * wo_n + ow0, {value}, n)")
    lines = ['@njit(cache=True, nogil=True, error_model="numpy")',
             "def kernel(x, wp, y, sh, dh, dw, top, left, first, last, b):",
             "    c_n, height, width = x.shape",
             "    cob_n, kh_n, kw_n = wp.shape[0], wp.shape[1], wp.shape[2]",
             "    co_n, ho, wo_n = y.shape  # ho >= rows",
             "    xf, wf, yf = x.reshape(-1), wp.reshape(-1), y.reshape(-1)",
             "    plane = height * width",
             "    for cob in range(first, last):",
             f"        for oh0 in range(0, ho, {rows}):",
             f"            oh = min(oh0, ho - {rows})",  # the last tile's rows overlap the one before
             "            for ow0 in range(0, wo_n, 16):",
             "                n = min(16, wo_n - ow0)"]
    lines += [" " * 16 + line for line in tile]
    lines += ["", "",
              '@njit(cache=True, nogil=True, error_model="numpy", parallel=True)',
              "def kernel_threads(x, wp, y, sh, dh, dw, top, left, first, last, b, parts):",
              "    for t in prange(parts):",
              "        kernel(x, wp, y, sh, dh, dw, top, left, first + (last - first) * t // parts,",
              "               first + (last - first) * (t + 1) // parts, b)"]
    return _HEADER + "\n".join(lines) + "\n"

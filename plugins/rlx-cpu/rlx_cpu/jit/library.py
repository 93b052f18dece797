"""Hand-written numba kernels of the CPU backend (softmax, attention, convolution, pooling).

This file is copied into the kernel cache directory and imported from there (see
``rlx_cpu.jit``), so it must only import absolute modules. Every kernel writes into
arrays it is given and allocates nothing. Definitions of the ops are in
``rlx_core.ir.ops``; these kernels follow the reference kernels' formulas.
"""
import numpy as np
from numba import njit

from rlx_cpu.jit.fastmath import fast_exp, fast_tanh
from rlx_cpu.jit.scalar import maximum, typed

# Attention visibility modes (the ``mask`` attribute; custom and bias come as inputs).
MASK_NONE, MASK_CAUSAL, MASK_SLIDING = 0, 1, 2

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")
# Kernels that sum rows: let LLVM reorder the additions so that it can vectorize them.
_REDUCING = dict(_OPTIONS, fastmath={"reassoc"})


@njit(**_REDUCING)
def softmax(x, y, log):
    """softmax (``log``: log_softmax) of ``x [outer, n, inner]`` along axis 1, into ``y``."""
    outer, n, inner = x.shape
    for o in range(outer):
        for i in range(inner):
            top = typed(-np.inf, x.dtype)
            for j in range(n):
                top = maximum(top, x[o, j, i])
            total = 0.0
            for j in range(n):
                e = fast_exp(x[o, j, i] - top)
                total += e
                if not log:
                    y[o, j, i] = e
            if log:
                shift = top + np.log(total)
                for j in range(n):
                    y[o, j, i] = x[o, j, i] - shift
            else:
                inv = typed(1.0 / total, y.dtype)
                for j in range(n):
                    y[o, j, i] = y[o, j, i] * inv


@njit(**_REDUCING)
def attention_scores(s, scale, softcap, visible, bias):
    """Scores ``s [B, H, Sq, Sk]`` (q.k products), in place: scaled, soft-capped
    (``softcap > 0``), plus ``bias`` (unless empty), -inf where ``visible`` (unless
    empty) is False. Both are broadcast views of the scores' shape."""
    batch, heads, sq, sk = s.shape
    with_mask, with_bias = visible.size > 0, bias.size > 0
    hidden = typed(-np.inf, s.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(sq):
                for j in range(sk):
                    v = s[b, h, i, j] * scale
                    if softcap > 0:
                        v = softcap * fast_tanh(v / softcap)
                    if with_bias:
                        v = v + bias[b, h, i, j]
                    if with_mask and not visible[b, h, i, j]:
                        v = hidden
                    s[b, h, i, j] = v


@njit(inline="always")
def _above(v, top):
    return v if v > top else top


@njit(**_OPTIONS)
def row_max(row, lowest):
    """The largest element of ``row`` above ``lowest`` (NaNs never are; ``lowest`` if
    none is), with eight independent running maxima: LLVM does not vectorize a float
    max without fast-math flags that would change NaN and inf semantics, and one running
    maximum is a chain of dependent compares (about 2x slower here)."""
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = lowest
    n = row.shape[0] - row.shape[0] % 8
    for j in range(0, n, 8):
        t0 = _above(row[j], t0)
        t1 = _above(row[j + 1], t1)
        t2 = _above(row[j + 2], t2)
        t3 = _above(row[j + 3], t3)
        t4 = _above(row[j + 4], t4)
        t5 = _above(row[j + 5], t5)
        t6 = _above(row[j + 6], t6)
        t7 = _above(row[j + 7], t7)
    for j in range(n, row.shape[0]):
        t0 = _above(row[j], t0)
    return _above(_above(_above(t0, t1), _above(t2, t3)), _above(_above(t4, t5), _above(t6, t7)))


@njit(**_REDUCING)
def attention_weights(s, scale, mode, window):
    """Scores ``s [B*H, Sq, Sk]`` -> attention weights, in place: each row is scaled and
    softmax-normalized over its visible keys -- all of them, or (``mode`` causal /
    sliding with ``window``) a range ending at the query's position, queries being
    aligned to the end of the keys. Hidden keys, and every key of a row without a
    finite score, get weight 0."""
    rows, sq, sk = s.shape
    offset = sk - sq
    zero, hidden = typed(0, s.dtype), typed(-np.inf, s.dtype)
    for b in range(rows):
        for i in range(sq):
            stop = sk if mode == MASK_NONE else min(sk, max(i + offset + 1, 0))
            start = max(stop - window, 0) if mode == MASK_SLIDING else 0
            s[b, i, :start] = zero
            s[b, i, stop:] = zero
            row = s[b, i, start:stop]  # (a slice: indexing s[b, i, start + j] would not vectorize)
            for j in range(row.shape[0]):
                row[j] = row[j] * scale
            top = row_max(row, hidden)
            if top == hidden:
                row[:] = zero
                continue
            total = zero
            for j in range(row.shape[0]):
                e = fast_exp(row[j] - top)
                row[j] = e
                total += e
            inv = typed(1, s.dtype) / total
            for j in range(row.shape[0]):
                row[j] = row[j] * inv


@njit(**_OPTIONS)
def im2col(x, cols, kh, kw, sh, sw, ph, pw, dh, dw, wo):
    """The patches of ``x [C, H, W]`` as columns: ``cols[(c*kh + i)*kw + j, oh*wo + ow]`` is
    the input element tap (i, j) of output position (oh, ow) reads (0 in the padding)."""
    channels, height, width = x.shape
    ho = cols.shape[1] // wo
    zero = typed(0, x.dtype)
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                row = (c * kh + i) * kw + j
                for oh in range(ho):
                    ih = oh * sh - ph + i * dh
                    row_inside = 0 <= ih < height
                    for ow in range(wo):
                        iw = ow * sw - pw + j * dw
                        inside = row_inside and 0 <= iw < width
                        cols[row, oh * wo + ow] = x[c, ih, iw] if inside else zero


@njit(**_OPTIONS)
def pack_conv_weights(w, wp):
    """``w [Co, C, kh, kw]`` into the SIMD convs' ``wp [ceil(Co/L), kh, kw, C, L]``
    (``rlx_cpu.jit.simd``: L output channels contiguous per input channel and tap);
    the lanes past Co are left as they are (zeros from the buffer's allocation)."""
    out_c, channels, kh, kw = w.shape
    lanes = wp.shape[4]
    for o in range(out_c):
        block, lane = o // lanes, o % lanes
        for c in range(channels):
            for i in range(kh):
                for j in range(kw):
                    wp[block, i, j, c, lane] = w[o, c, i, j]


@njit(**_OPTIONS)
def repack_conv_weights(w, seen, wp):
    """``pack_conv_weights(w, wp)`` if ``w`` differs from ``seen`` (its copy from the last
    pack; NaN weights always differ), keeping the new copy: params change rarely, and
    comparing two contiguous arrays costs a fraction of the scattered writes of a pack."""
    flat, last = w.reshape(-1), seen.reshape(-1)
    changed = False
    for i in range(flat.shape[0]):
        changed |= flat[i] != last[i]
    if changed:
        for i in range(flat.shape[0]):  # a loop: numba's slice assignment costs 1.5 s to compile
            last[i] = flat[i]
        pack_conv_weights(w, wp)


@njit(**_OPTIONS)
def pad2d(x, xp, top, left):
    """``x [C, H, W]`` into ``xp [C, Hp, Wp]`` at row ``top``, column ``left``; zeros around."""
    channels, height, width = x.shape
    zero = typed(0, xp.dtype)
    for c in range(channels):
        for h in range(xp.shape[1]):
            row = xp[c, h]
            if top <= h < top + height:
                src = x[c, h - top]
                for w in range(left):
                    row[w] = zero
                for w in range(width):
                    row[left + w] = src[w]
                for w in range(left + width, xp.shape[2]):
                    row[w] = zero
            else:
                for w in range(xp.shape[2]):
                    row[w] = zero


@njit(**_OPTIONS)
def pool2d(x, y, is_max, kh, kw, sh, sw, ph, pw, dh, dw, ph_end, pw_end, count_include_pad):
    """Max or average pooling of ``x [N, C, H, W]`` into ``y`` (the ``pool2d`` op).

    Max ignores padding (-inf if a window holds no element); average divides by the
    counted positions: the window's elements, plus its padding positions when
    ``count_include_pad`` (never positions beyond the end padding)."""
    batch, channels, height, width = x.shape
    out_h, out_w = y.shape[2], y.shape[3]
    for n in range(batch):
        for c in range(channels):
            for oh in range(out_h):
                for ow in range(out_w):
                    acc = typed(-np.inf if is_max else 0, x.dtype)
                    count = 0
                    for i in range(kh):
                        ih = oh * sh - ph + i * dh
                        for j in range(kw):
                            iw = ow * sw - pw + j * dw
                            inside = 0 <= ih < height and 0 <= iw < width
                            if inside:
                                acc = maximum(acc, x[n, c, ih, iw]) if is_max else acc + x[n, c, ih, iw]
                            if count_include_pad:
                                count += -ph <= ih < height + ph_end and -pw <= iw < width + pw_end
                            else:
                                count += inside
                    y[n, c, oh, ow] = acc if is_max else acc / count

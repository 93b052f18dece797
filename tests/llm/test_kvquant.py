"""GGML block formats: bit-exact against gguf's reference quantizers (a port of
ggml-quants.c that nobody here wrote), GGML's byte sizes, and GGML's error bounds."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlx_core.errors import InputError
from rlx_core.llm import F16, KV_FORMATS, Q4_0, Q5_0, Q8_0, LLMConfigError, dequantize, kv_format, quantize

gguf = pytest.importorskip("gguf")
GGML_TYPE = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
             "q5_0": gguf.GGMLQuantizationType.Q5_0, "f16": gguf.GGMLQuantizationType.F16}
FORMATS = sorted(KV_FORMATS)


def _gguf_bytes(x, name):
    with np.errstate(over="ignore", invalid="ignore"):      # 1 / d overflowing: see below
        return gguf.quants.quantize(x, GGML_TYPE[name]).view(np.uint8).reshape(x.shape[0], -1)


def _awkward_blocks(rng):
    """Blocks that exercise the quantizers' edge cases, one per row of 32 values."""
    rows = [np.zeros(32), np.full(32, 1.5), np.full(32, -2.0), np.linspace(-1, 1, 32),
            np.where(np.arange(32) % 2, 3.0, -3.0),                  # +-max both present, -max first
            np.where(np.arange(32) % 2, -3.0, 3.0),                  # +-max both present, +max first
            np.r_[np.zeros(31), -7.0], np.r_[1e-30, np.zeros(31)],   # lone extreme, subnormal-scale block
            np.full(32, 65504.0 * 8), np.arange(32) * 0.5 - 8,       # largest q4_0 scale; .5 ties for q8_0
            rng.standard_normal(32) * 1e-6, rng.standard_normal(32) * 1e4]
    return np.array(rows, np.float32)


@pytest.mark.parametrize("name", FORMATS)
def test_bit_identical_to_ggml_reference(name):
    rng = np.random.default_rng(7)
    for scale in (1e-3, 1.0, 300.0):
        x = (rng.standard_normal((96, 256)) * scale).astype(np.float32)
        assert quantize(x, name).tobytes() == _gguf_bytes(x, name).tobytes()
    awkward = _awkward_blocks(rng)
    if name == "f16":
        awkward = awkward[np.abs(awkward).max(axis=1) < 65504]
    assert quantize(awkward, name).tobytes() == _gguf_bytes(awkward, name).tobytes()


def _ggml_scale(blocks, name):
    """The f32 scale ``d`` of each 32-value block, by ggml-quants.c's definition."""
    if name == "q8_0":
        return np.abs(blocks).max(axis=1) / np.float32(127)
    signed_max = blocks[np.arange(blocks.shape[0]), np.abs(blocks).argmax(axis=1)]
    return signed_max / np.float32(-8 if name == "q4_0" else -16)


def _reciprocal_overflows(x, name):
    """Blocks whose ``1 / d`` overflows f32: GGML converts inf to an integer code there
    (undefined in C), so only their dequantized values (all 0) can be compared."""
    if name == "f16":
        return np.zeros(x.size // 32, bool)
    d = _ggml_scale(x.reshape(-1, 32), name)
    with np.errstate(divide="ignore", over="ignore"):
        return (d != 0) & ~np.isfinite(np.float32(1) / d)


@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_bit_identical_on_random_blocks(name, data):
    limit = 6e4 if name == "f16" else 5e5          # block scales must fit f16
    x = data.draw(hnp.arrays(np.float32, st.tuples(st.integers(1, 6), st.just(64)),
                             elements=st.floats(-limit, limit, width=32)))
    ours, theirs = quantize(x, name), _gguf_bytes(x, name)
    comparable = ~_reciprocal_overflows(x, name).reshape(x.shape[0], -1).any(axis=1)
    assert ours[comparable].tobytes() == theirs[comparable].tobytes()
    reference = gguf.quants.dequantize(theirs.reshape(-1), GGML_TYPE[name]).reshape(x.shape)
    np.testing.assert_array_equal(dequantize(ours, name), reference)


# Block maxima whose scale d = max / divisor is subnormal in f32 (issue 21), from where
# 1 / d stops overflowing (d > 1 / f32 max) up to where d becomes normal (d < f32 tiny):
# about 3.7e-37 .. 1.5e-36 for q8_0, 2.4e-38 .. 9.4e-38 for q4_0, 4.7e-38 .. 1.9e-37 for q5_0.
# GGML divides by such a d as by any other.
_F32 = np.finfo(np.float32)
SUBNORMAL_SCALE_MAXIMA = {name: (float(np.float32(div / float(_F32.max) * 1.001)),
                                 float(np.float32(div * float(_F32.tiny) * 0.999)))
                          for name, div in (("q8_0", 127), ("q4_0", 8), ("q5_0", 16))}


@pytest.mark.parametrize("name", sorted(SUBNORMAL_SCALE_MAXIMA))
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_subnormal_scales_are_bit_identical_to_gguf(name, data):
    lo, hi = SUBNORMAL_SCALE_MAXIMA[name]
    peak = data.draw(st.floats(lo, hi, width=32))
    shape = hnp.arrays(np.float32, (3, 32), elements=st.floats(-1, 1, width=32))
    x = data.draw(shape) * np.float32(peak)
    x[:, data.draw(st.integers(0, 31))] = np.float32(peak) * np.float32(data.draw(st.sampled_from([1, -1])))
    d = _ggml_scale(x, name)
    assert (np.abs(d) < _F32.tiny).all()                              # subnormal scales ...
    assume(not _reciprocal_overflows(x, name).any())                  # ... whose 1 / d fits f32
    assert quantize(x, name).tobytes() == _gguf_bytes(x, name).tobytes()


@pytest.mark.parametrize("name", sorted(SUBNORMAL_SCALE_MAXIMA))
def test_subnormal_scales_across_the_whole_range(name):
    """A sweep through every binade of the subnormal-scale range: all blocks whose 1 / d
    fits are bit-identical to gguf; those whose 1 / d overflows get the codes of an all-zero
    block (gguf's are arbitrary there) and dequantize to 0."""
    lo, hi = SUBNORMAL_SCALE_MAXIMA[name]
    rng = np.random.default_rng(21)
    peaks = np.geomspace(lo / 4, hi * 2, 400).astype(np.float32)
    x = (rng.uniform(-1, 1, (400, 32)) * peaks[:, None]).astype(np.float32)
    x[:, 5] = peaks
    overflow = _reciprocal_overflows(x, name)
    assert overflow.sum() > 50 and (~overflow).sum() > 200
    theirs = _gguf_bytes(x, name)
    ours = quantize(x, name)
    assert ours[~overflow].tobytes() == theirs[~overflow].tobytes()
    np.testing.assert_array_equal(np.abs(ours[overflow, :2].view(np.float16)), 0)   # d is f16 (-)0
    np.testing.assert_array_equal(ours[overflow, 2:], np.broadcast_to(quantize(np.zeros(32, np.float32), name)[2:],
                                                                      ours[overflow, 2:].shape))
    np.testing.assert_array_equal(dequantize(ours[overflow], name), 0)


def test_multithreaded_chunks_match_single_chunk():
    x = np.random.default_rng(3).standard_normal(8 * 4096 * 32 + 64).astype(np.float32)
    for fmt in (Q8_0, Q4_0, Q5_0, F16):
        whole = quantize(x, fmt)
        pieces = np.concatenate([quantize(part, fmt) for part in np.split(x, [4096 * 32, 5 * 4096 * 32])])
        assert whole.tobytes() == pieces.tobytes()
        np.testing.assert_array_equal(dequantize(whole, fmt), dequantize(pieces, fmt))


@pytest.mark.parametrize("fmt, block_bytes, bits", [(Q8_0, 34, 8.5), (Q4_0, 18, 4.5), (Q5_0, 22, 5.5), (F16, 2, 16)])
def test_byte_sizes_are_ggml(fmt, block_bytes, bits):
    assert fmt.block_bytes == block_bytes and fmt.bits_per_value == bits
    assert fmt.block_bytes == gguf.GGML_QUANT_SIZES[GGML_TYPE[fmt.name]][1]
    assert fmt.block_values == gguf.GGML_QUANT_SIZES[GGML_TYPE[fmt.name]][0]
    x = np.ones((3, 4, 128), np.float32)
    assert quantize(x, fmt).shape == (3, 4, 128 // fmt.block_values * block_bytes)
    assert fmt.row_bytes(128) == 128 // fmt.block_values * block_bytes


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q5_0"])
def test_round_trip_error_within_block_bound(name):
    """GGML's grids: q8_0 codes -127..127, q4_0 -8..7, q5_0 -16..15 (times d). A value is
    off by at most |d|/2, except q4_0/q5_0 values beyond the top code (x/d > 7.5 or 15.5,
    on the side opposite the extreme), which clamp: at most |d|. Rounding d to f16 adds
    |d - d16| * |code|."""
    x = (np.random.default_rng(1).standard_normal((2000, 32)) * 10).astype(np.float32)
    data = quantize(x, name)
    d16 = data[:, :2].copy().view(np.float16).astype(np.float64)          # [n, 1]
    if name == "q8_0":
        d, top = np.abs(x).max(axis=1, keepdims=True).astype(np.float64) / 127, 127
    else:
        levels = {"q4_0": 8, "q5_0": 16}[name]
        m = np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], 1).astype(np.float64)
        d, top = m / -levels, levels - 1
    ratio = x / d
    clamped = ratio > top + 0.5
    bound = np.where(clamped, 1.0, 0.5) * np.abs(d) + np.abs(d - d16) * (top + 1) + 1e-6 * np.abs(d)
    err = np.abs(dequantize(data, name).astype(np.float64) - x)
    assert (err <= bound).all()
    assert clamped.any() == (name != "q8_0")


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q5_0"])
def test_total_error_meets_ggml_test_quantize_fns(name):
    """llama.cpp's tests/test-quantize-fns.cpp: data 0.1 + 2 cos(i), 32*128 values,
    sqrt(sum of squared errors) / n < MAX_QUANTIZATION_TOTAL_ERROR = 0.002."""
    n = 32 * 128
    x = (0.1 + 2 * np.cos(np.arange(n, dtype=np.float32))).astype(np.float32)
    out = dequantize(quantize(x, name), name)
    assert np.sqrt(np.sum((x.astype(np.float64) - out) ** 2)) / n < 0.002


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q5_0"])
def test_blocks_below_f16_resolution_quantize_to_zero(name):
    x = np.r_[np.full(16, 1e-38), np.full(16, -3e-39)].astype(np.float32)
    np.testing.assert_array_equal(dequantize(quantize(x, name), name), np.zeros(32, np.float32))


def test_f16_is_ieee_half():
    x = np.array([0, -0.0, 1 / 3, 65504, -1e-8, 2.5], np.float32)
    assert quantize(x, "f16").tobytes() == x.astype(np.float16).tobytes()
    np.testing.assert_array_equal(dequantize(quantize(x, "f16"), "f16"), x.astype(np.float16).astype(np.float32))


def test_q5_0_layout_by_hand():
    """One block written out bit by bit from the layout in ggml-common.h."""
    x = np.arange(32, dtype=np.float32) - 16           # m = -16 (first of largest magnitude)
    block = quantize(x, "q5_0")
    d = np.float32(-16) / np.float32(-16)
    assert block[:2].view(np.float16)[0] == np.float16(d)
    codes = np.minimum(31, np.trunc(x / d + 16.5)).astype(np.uint32)
    qh = int(block[2:6].view("<u4")[0])
    assert [(qh >> j) & 1 for j in range(32)] == list(codes >> 4)
    assert list(block[6:] & 0xF) == list(codes[:16] & 0xF)
    assert list(block[6:] >> 4) == list(codes[16:] & 0xF)


def test_errors_name_the_problem():
    with pytest.raises(LLMConfigError, match="q4_0, q5_0|f16, q8_0"):
        kv_format("q3_k")
    with pytest.raises(InputError, match="multiple of 32"):
        quantize(np.zeros(48, np.float32), "q8_0")
    with pytest.raises(InputError, match="non-finite"):
        quantize(np.r_[np.zeros(31), np.nan].astype(np.float32), "q4_0")
    with pytest.raises(InputError, match="non-finite"):
        quantize(np.r_[np.zeros(31), np.inf].astype(np.float32), "q8_0")
    with pytest.raises(InputError, match="overflows f16"):
        quantize(np.full(32, 1e7, np.float32), "q4_0")
    with pytest.raises(InputError, match="f16's range"):
        quantize(np.array([1e6], np.float32), "f16")
    with pytest.raises(InputError, match="18-byte blocks"):
        dequantize(np.zeros(20, np.uint8), "q4_0")
    with pytest.raises(InputError, match="real numbers"):
        quantize(["a"] * 32, "q8_0")
    with pytest.raises(LLMConfigError, match="not a multiple of 32"):
        Q8_0.row_bytes(100)

"""quantize / dequantize against onnxruntime and ONNX's node tests; the round trip's
error bound; and the shape rules' errors."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlx_core import DType, Graph
from rlx_core.errors import DTypeError, OpAttributeError, ShapeError
from rlx_core.ir.ops.quant import QUANTIZED
from rlx_core.testing import assert_close
from rlx_core.testing.external import onnx_node_cases, run_onnx_node, run_reference

pytest.importorskip("onnxruntime")

KINDS = ("quantize", "dequantize")
rng = np.random.default_rng(3)
OPSET = 19  # float16 inputs and scales


def _per_axis(axis, dims, scale_low=0.05, scale_high=4.0):
    return rng.uniform(scale_low, scale_high, dims[axis]).astype(np.float32)


@pytest.mark.parametrize("out", ["i8", "u8"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("with_zero_point", [True, False])
def test_quantize_matches_onnxruntime(out, axis, with_zero_point):
    dims = (3, 4, 5)
    x = (rng.standard_normal(dims) * 200).astype(np.float32)
    x.flat[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1e9, -np.inf]  # ties and saturation
    scale = np.float32(1.0) if axis is None else _per_axis(axis, dims, 0.5, 3.0)
    if axis is None:
        x[1:] /= 1.7  # leave the exact ties of the first row alone
    info = np.iinfo(DType.of(out).np)
    zp = rng.integers(info.min, info.max, np.shape(scale), endpoint=True).astype(DType.of(out).np) \
        if with_zero_point else None
    attrs = {} if axis is None else {"axis": axis}
    if with_zero_point:
        expected = run_onnx_node("QuantizeLinear", [x, scale, zp], attrs, opset=OPSET)[0]
    else:  # ONNX's output type without a zero point is u8; an explicit zero 0 gives i8
        zero = np.zeros(np.shape(scale), DType.of(out).np)
        expected = run_onnx_node("QuantizeLinear", [x, scale, zero], attrs, opset=OPSET)[0]
    kw = dict(axis=axis if axis is not None else 1, to=None if with_zero_point else out)
    got = run_reference(lambda g, x: g.quantize(x, scale, zp, **kw), x)
    assert got.dtype == DType.of(out).np
    np.testing.assert_array_equal(got, expected)


def test_quantize_f16_matches_onnxruntime():
    x = (rng.standard_normal((4, 6)) * 50).astype(np.float16)
    scale, zp = np.float16(0.5), np.uint8(10)
    expected = run_onnx_node("QuantizeLinear", [x, scale, zp], opset=OPSET)[0]
    np.testing.assert_array_equal(run_reference(lambda g, x: g.quantize(x, scale, zp), x), expected)


@pytest.mark.parametrize("dt", ["i8", "u8", "i32"])
@pytest.mark.parametrize("axis", [None, 1, -3])
@pytest.mark.parametrize("scale_dt", [np.float32, np.float16])
def test_dequantize_matches_onnxruntime(dt, axis, scale_dt):
    dims = (3, 4, 2)
    info = np.iinfo(DType.of(dt).np)
    q = rng.integers(info.min, info.max, dims, endpoint=True).astype(DType.of(dt).np)
    if scale_dt is np.float16:
        q = (q // max(1, (int(info.max) - int(info.min)) // 500)).astype(q.dtype)  # stay inside f16's range
    scale = (np.float32(0.25) if axis is None else _per_axis(axis, dims)).astype(scale_dt)
    zp = None if dt == "i32" else rng.integers(info.min, info.max, np.shape(scale), endpoint=True).astype(q.dtype)
    attrs = {} if axis is None else {"axis": axis}
    expected = run_onnx_node("DequantizeLinear", [q, scale, zp], attrs, opset=OPSET)[0]
    got = run_reference(lambda g, q: g.dequantize(q, scale, zp, axis=axis if axis is not None else 1), q)
    assert_close(got, expected, DType.of(scale_dt))


@pytest.mark.parametrize("op_type", ["QuantizeLinear", "DequantizeLinear"])
def test_matches_onnx_node_tests(op_type):
    """8-bit cases; 16-bit and blocked variants are outside our op kinds."""
    cases = [c for c in onnx_node_cases(op_type) if "block_size" not in c.attrs
             and all(a is None or a.dtype in (np.float32, np.uint8, np.int8) for a in c.inputs + c.outputs)]
    assert len(cases) >= 2, [c.name for c in cases]
    for case in cases:
        method = "quantize" if op_type == "QuantizeLinear" else "dequantize"
        got = run_reference(lambda g, x, s, *z: getattr(g, method)(x, s, *z, axis=case.attrs.get("axis", 1)),
                            *case.inputs)
        np.testing.assert_array_equal(got, case.outputs[0], err_msg=case.name)


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-3, 10.0), st.sampled_from(sorted(QUANTIZED, key=lambda d: d.value)), st.integers(0, 2 ** 32 - 1))
def test_dequantize_of_quantize_is_within_half_a_step(scale, out, seed):
    """Inside the representable range, rounding to the nearest step loses <= scale/2."""
    info = np.iinfo(out.np)
    zero = (int(info.min) + int(info.max)) // 2
    x = np.random.default_rng(seed).uniform(info.min - zero, info.max - zero, 64) * scale
    x = x.astype(np.float32)
    scale32 = np.float32(scale)
    back = run_reference(lambda g, x: g.dequantize(g.quantize(x, scale32, np.array(zero, out.np)), scale32,
                                                   np.array(zero, out.np)), x)
    assert np.all(np.abs(back - x) <= scale32 / 2 * (1 + 1e-5) + 1e-6)


def test_quantize_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (2, 3, 4))
    with pytest.raises(ShapeError, match=r"per-axis scale needs 3 entries \(x \[2, 3, 4\] along axis 1\), got 4"):
        g.quantize(x, np.ones(4))
    with pytest.raises(ShapeError, match=r"scale must be rank 0 \(per tensor\) or 1-D \(per axis\), got \[3, 1\]"):
        g.quantize(x, np.ones((3, 1)))
    with pytest.raises(ShapeError, match=r"zero_point must have the scale's dims \[3\], got \[\]"):
        g.quantize(x, np.ones(3), np.uint8(3))
    with pytest.raises(DTypeError, match="quantize produces i8 or u8, got to i32"):
        g.quantize(x, 1.0, to="i32")
    with pytest.raises(DTypeError, match="quantize produces i8 or u8, got zero_point i16"):
        g.quantize(x, 1.0, np.int16(0))
    with pytest.raises(OpAttributeError, match="quantize to=i8 disagrees with the zero point's dtype u8"):
        g.quantize(x, 1.0, np.uint8(0), to="i8")
    with pytest.raises(DTypeError, match="quantize scale must have the input's dtype f32, got f64"):
        g.quantize(x, g.input("s", (), "f64"))
    with pytest.raises(ShapeError, match="quantize axis 3 is out of range for rank 3"):
        g.quantize(x, np.ones(4), axis=3)
    with pytest.raises(DTypeError, match="quantize does not accept i8"):
        g.quantize(g.input("q", (2,), "i8"), 1.0)


def test_dequantize_errors_say_what_was_expected():
    g = Graph()
    q = g.input("q", (2, 3), "u8")
    with pytest.raises(DTypeError, match="dequantize scale must be a float dtype, got i32"):
        g.dequantize(q, g.input("s", (), "i32"))
    with pytest.raises(DTypeError, match="dequantize zero_point must have q's dtype u8, got i8"):
        g.dequantize(q, 1.0, np.int8(0))
    with pytest.raises(ShapeError, match="per-axis scale needs 2 entries"):
        g.dequantize(q, np.ones(3, np.float32), axis=0)
    with pytest.raises(DTypeError, match="dequantize does not accept f32"):
        g.dequantize(g.input("f", (2,)), 1.0)


def test_quantize_stores_the_resolved_output_dtype():
    g = Graph()
    x = g.input("x", (2, 3))
    assert g.quantize(x, 1.0).node.attrs["to"] is DType.I8
    assert g.quantize(x, 1.0, np.uint8(4)).node.attrs["to"] is DType.U8
    assert g.quantize(x, np.ones(3), axis=-1).node.attrs["axis"] == 1

"""The conv-family reference kernels against torch, onnxruntime and ONNX's node tests;
conv_transpose2d as conv's adjoint; and the shape rules' errors."""
import itertools

import numpy as np
import pytest

from rlx_core import Graph
from rlx_core.errors import DTypeError, OpAttributeError, ShapeError
from rlx_core.testing import assert_close
from rlx_core.testing.external import onnx_node_cases, run_onnx_node, run_reference

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytest.importorskip("onnxruntime")

KINDS = ("conv", "conv_transpose2d", "pool2d")
rng = np.random.default_rng(5)


def _normal(*dims, dtype=np.float32):
    return rng.standard_normal(dims).astype(dtype)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _onnx_geometry(attrs, spatial):
    """Our geometry attributes from an ONNX node's (whose strides default to 1)."""
    return {"strides": tuple(attrs.get("strides", (1,) * spatial)),
            "pads": tuple(attrs.get("pads", (0,) * 2 * spatial)),
            "dilations": tuple(attrs.get("dilations", (1,) * spatial))}


# --- conv ------------------------------------------------------------------------------

_CONV_GRID = list(itertools.product([1, 2], [0, 1, 2], [1, 2], [1, 2]))  # stride, pad, dilation, groups


@pytest.mark.parametrize("stride,pad,dilation,groups", _CONV_GRID)
@pytest.mark.parametrize("spatial", [1, 2])
def test_conv_matches_torch(spatial, stride, pad, dilation, groups):
    x = _normal(2, 4, *(9, 8)[:spatial])
    w = _normal(6, 4 // groups, *(3, 2)[:spatial])
    bias = _normal(6)
    torch_conv = F.conv1d if spatial == 1 else F.conv2d
    expected = torch_conv(_t(x), _t(w), _t(bias), stride=stride, padding=pad, dilation=dilation, groups=groups)
    got = run_reference(lambda g, x, w, b: g.conv(x, w, b, strides=stride, pads=pad, dilations=dilation,
                                                  groups=groups), x, w, bias)
    assert_close(got, expected.numpy(), "f32")


@pytest.mark.parametrize("pads", [(0, 2), (2, 1, 0, 1), (1, 0, 2, 3)])
def test_conv_asymmetric_pads_match_onnxruntime(pads):
    spatial = len(pads) // 2
    x, w, bias = _normal(1, 4, *(7, 6)[:spatial]), _normal(4, 2, *(3, 3)[:spatial]), _normal(4)
    attrs = {"pads": pads, "strides": (2,) * spatial, "dilations": (1, 2)[:spatial], "group": 2}
    expected = run_onnx_node("Conv", [x, w, bias], attrs, opset=11)[0]
    got = run_reference(lambda g, x, w, b: g.conv(x, w, b, strides=attrs["strides"], pads=pads,
                                                  dilations=attrs["dilations"], groups=2), x, w, bias)
    assert_close(got, expected, "f32")


def test_conv_matches_onnx_node_tests():
    cases = [c for c in onnx_node_cases("Conv") if "auto_pad" not in c.attrs]
    assert len(cases) >= 5, [c.name for c in cases]
    for case in cases:
        geometry = _onnx_geometry(case.attrs, case.inputs[0].ndim - 2)
        got = run_reference(lambda g, x, w: g.conv(x, w, groups=case.attrs.get("group", 1), **geometry),
                            *case.inputs)
        assert_close(got, case.outputs[0], "f32", what=case.name)


def test_conv_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (1, 4, 5, 5))
    with pytest.raises(ShapeError, match=r"x has 4 channels but w \[2, 3, 3, 3\] with groups=1 expects 3"):
        g.conv(x, g.input("w", (2, 3, 3, 3)))
    with pytest.raises(OpAttributeError, match="groups must be >= 1 and divide the channel counts {'Co': 3}"):
        g.conv(x, g.input("w2", (3, 2, 3, 3)), groups=2)
    with pytest.raises(ShapeError, match=r"padded input \[5, 5\] .* is smaller than the kernel \[6, 3\]"):
        g.conv(x, g.input("w3", (2, 4, 6, 3)))
    with pytest.raises(OpAttributeError, match=r"conv strides must be 2 integer\(s\) >= 1, got \[1\]"):
        g.op("conv", x, g.input("w4", (2, 4, 3, 3)), strides=(1,))
    with pytest.raises(OpAttributeError, match=r"conv pads must be 4 integer\(s\) >= 0, got \[-1, -1, -1, -1\]"):
        g.conv(x, g.input("w5", (2, 4, 3, 3)), pads=-1)
    with pytest.raises(ShapeError, match=r"conv needs x \[N, C, L\] or \[N, C, H, W\]"):
        g.conv(g.input("x3", (1, 4, 5, 5, 5)), g.input("w6", (2, 4, 3, 3, 3)))
    with pytest.raises(ShapeError, match=r"conv bias must have dims \[2\], got \[3\]"):
        g.conv(x, g.input("w7", (2, 4, 3, 3)), np.zeros(3))
    with pytest.raises(DTypeError, match="conv w must have the input's dtype f32, got f64"):
        g.conv(x, g.input("w8", (2, 4, 3, 3), "f64"))
    with pytest.raises(ShapeError, match=r"kernel dims must be >= 1"):
        g.conv(x, g.input("w9", (2, 4, 0, 3)))


# --- conv_transpose2d ------------------------------------------------------------------

_CONVT_GRID = [  # stride, pad, dilation, output_padding, groups
    (1, 0, 1, 0, 1), (2, 0, 1, 1, 1), (2, 1, 1, 0, 2), (3, 1, 2, 2, 1), ((2, 1), (1, 0), (1, 3), (1, 2), 2),
    (1, 2, 2, 1, 1)]


@pytest.mark.parametrize("stride,pad,dilation,output_padding,groups", _CONVT_GRID)
def test_conv_transpose2d_matches_torch(stride, pad, dilation, output_padding, groups):
    x, w, bias = _normal(2, 4, 5, 4), _normal(4, 3, 3, 2), _normal(3 * groups)
    expected = F.conv_transpose2d(_t(x), _t(w), _t(bias), stride=stride, padding=pad, output_padding=output_padding,
                                  groups=groups, dilation=dilation)
    pads = pad if isinstance(pad, int) else pad + pad
    got = run_reference(lambda g, x, w, b: g.conv_transpose2d(x, w, b, strides=stride, pads=pads, dilations=dilation,
                                                              output_padding=output_padding, groups=groups), x, w, bias)
    assert_close(got, expected.numpy(), "f32")


def test_conv_transpose2d_asymmetric_pads_match_onnxruntime():
    x, w = _normal(1, 2, 4, 5), _normal(2, 3, 3, 3)
    attrs = {"strides": (2, 3), "pads": (0, 2, 1, 1), "dilations": (2, 1), "output_padding": (1, 0)}
    expected = run_onnx_node("ConvTranspose", [x, w], attrs, opset=11)[0]
    assert_close(run_reference(lambda g, x, w: g.conv_transpose2d(x, w, **attrs), x, w), expected, "f32")


def test_conv_transpose2d_matches_onnx_node_tests():
    cases = [c for c in onnx_node_cases("ConvTranspose")
             if c.inputs[0].ndim == 4 and not {"auto_pad", "output_shape"} & set(c.attrs)]
    assert len(cases) >= 5, [c.name for c in cases]
    for case in cases:
        attrs = dict(_onnx_geometry(case.attrs, 2), output_padding=tuple(case.attrs.get("output_padding", (0, 0))),
                     groups=case.attrs.get("group", 1))
        got = run_reference(lambda g, x, w: g.conv_transpose2d(x, w, **attrs), *case.inputs)
        assert_close(got, case.outputs[0], "f32", what=case.name)


@pytest.mark.parametrize("stride,pads,dilation,groups", [((1, 1), (0, 0, 0, 0), (1, 1), 1),
                                                         ((2, 3), (1, 0, 2, 1), (1, 2), 2),
                                                         ((3, 2), (2, 2, 0, 1), (2, 1), 3)])
def test_conv_transpose2d_is_the_adjoint_of_conv(stride, pads, dilation, groups):
    """<conv(x), y> == <x, conv_transpose(y)> for the same weights and geometry; the
    output padding restores the input size that conv's floor division loses."""
    x, w = _normal(2, 6, 11, 10, dtype=np.float64), _normal(3 * groups, 6 // groups, 3, 2, dtype=np.float64)
    geometry = dict(strides=stride, pads=pads, dilations=dilation)
    conv_x = run_reference(lambda g, x, w: g.conv(x, w, groups=groups, **geometry), x, w)
    y = _normal(*conv_x.shape, dtype=np.float64)
    full = [(o - 1) * s - pb - pe + d * (k - 1) + 1 for o, s, pb, pe, d, k in
            zip(y.shape[2:], stride, pads[:2], pads[2:], dilation, w.shape[2:])]
    output_padding = tuple(n - f for n, f in zip(x.shape[2:], full))
    convt_y = run_reference(lambda g, y, w: g.conv_transpose2d(y, w, groups=groups, output_padding=output_padding,
                                                               **geometry), y, w)
    assert convt_y.shape == x.shape
    np.testing.assert_allclose(np.vdot(conv_x, y), np.vdot(x, convt_y), rtol=1e-12)


def test_conv_transpose2d_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (1, 4, 3, 3))
    with pytest.raises(ShapeError, match=r"x has 4 channels but w \[3, 2, 3, 3\] expects 3"):
        g.conv_transpose2d(x, g.input("w", (3, 2, 3, 3)))
    w = g.input("w2", (4, 2, 3, 3))
    with pytest.raises(OpAttributeError, match="output_padding must be 2 integers, each >= 0 and smaller than"):
        g.conv_transpose2d(x, w, strides=2, output_padding=2)
    with pytest.raises(OpAttributeError, match="divide the channel counts {'Ci': 4}"):
        g.conv_transpose2d(x, w, groups=3)
    with pytest.raises(ShapeError, match="gives no output along spatial axis 0"):
        g.conv_transpose2d(x, w, pads=(3, 0, 3, 0))
    with pytest.raises(ShapeError, match=r"conv_transpose2d bias must have dims \[4\], got \[2\]"):
        g.conv_transpose2d(x, w, np.zeros(2), groups=2)


# --- pool2d ----------------------------------------------------------------------------

_POOL_GRID = list(itertools.product([2, 3, (3, 2)], [None, 1, 2], [0, 1], [False, True]))  # kernel, stride, pad, ceil


@pytest.mark.parametrize("kernel,stride,pad,ceil", _POOL_GRID)
def test_pools_match_torch(kernel, stride, pad, ceil):
    x = _normal(2, 3, 8, 7)
    for include_pad in (False, True):
        got = run_reference(lambda g, x: g.pool2d(x, "avg", kernel, strides=stride, pads=pad, ceil_mode=ceil,
                                                  count_include_pad=include_pad), x)
        expected = F.avg_pool2d(_t(x), kernel, stride, pad, ceil_mode=ceil, count_include_pad=include_pad)
        assert_close(got, expected.numpy(), "f32")
    for dilation in (1, 2):
        got = run_reference(lambda g, x: g.pool2d(x, "max", kernel, strides=stride, pads=pad, dilations=dilation,
                                                  ceil_mode=ceil), x)
        expected = F.max_pool2d(_t(x), kernel, stride, pad, dilation=dilation, ceil_mode=ceil)
        assert_close(got, expected.numpy(), "f32")


@pytest.mark.parametrize("pads", [(0, 1, 1, 0), (2, 0, 1, 2)])
@pytest.mark.parametrize("ceil", [0, 1])
def test_pools_with_asymmetric_pads_match_onnxruntime(pads, ceil):
    x = _normal(1, 2, 7, 8)
    attrs = {"kernel_shape": (3, 3), "strides": (2, 2), "pads": pads, "ceil_mode": ceil}
    ours = dict(kernel=(3, 3), strides=(2, 2), pads=pads, ceil_mode=bool(ceil))
    for include_pad in (0, 1):
        expected = run_onnx_node("AveragePool", [x], dict(attrs, count_include_pad=include_pad), opset=19)[0]
        got = run_reference(lambda g, x: g.pool2d(x, "avg", count_include_pad=bool(include_pad), **ours), x)
        assert_close(got, expected, "f32")
    expected = run_onnx_node("MaxPool", [x], dict(attrs, dilations=(1, 2)), opset=12)[0]
    got = run_reference(lambda g, x: g.pool2d(x, "max", dilations=(1, 2), **ours), x)
    assert_close(got, expected, "f32")


@pytest.mark.parametrize("op_type,mode", [("MaxPool", "max"), ("AveragePool", "avg")])
def test_pools_match_onnx_node_tests(op_type, mode):
    """2-D float cases without auto_pad (our avg has no dilations). Some expected values
    are written to 4 digits, so they hold to ONNX's rtol of 1e-3 (10x ours for f32)."""
    cases = [c for c in onnx_node_cases(op_type) if c.inputs[0].ndim == 4 and c.inputs[0].dtype == np.float32
             and "auto_pad" not in c.attrs and not (mode == "avg" and "dilations" in c.attrs)]
    assert len(cases) >= 8, [c.name for c in cases]
    for case in cases:
        attrs = dict(_onnx_geometry(case.attrs, 2), kernel=tuple(case.attrs["kernel_shape"]),
                     ceil_mode=bool(case.attrs.get("ceil_mode", 0)))
        if mode == "avg":
            attrs["count_include_pad"] = bool(case.attrs.get("count_include_pad", 0))
        got = run_reference(lambda g, x: g.pool2d(x, mode, **attrs), case.inputs[0])
        assert_close(got, case.outputs[0], "f32", scale=10, what=case.name)


def test_max_pool_ignores_padding_and_propagates_nan():
    x = np.array([[[[-5.0, -7.0], [np.nan, -1.0]]]], np.float32)
    got = run_reference(lambda g, x: g.pool2d(x, "max", 2, strides=1, pads=1), x)
    np.testing.assert_array_equal(got[0, 0], [[-5, -5, -7], [np.nan, np.nan, -1], [np.nan, np.nan, -1]])


def test_dilated_max_pool_window_without_input_gives_minus_inf():
    x = np.array([[[[1.0, 2.0]]]], np.float32)
    got = run_reference(lambda g, x: g.pool2d(x, "max", (1, 2), strides=1, pads=(0, 2, 0, 2), dilations=(1, 3)), x)
    # Windows start at -2, -1, 0 and tap start and start + 3: the middle one only meets padding.
    np.testing.assert_array_equal(got[0, 0, 0], [2, -np.inf, 1])


def test_pool_errors_say_what_was_expected():
    g = Graph()
    x = g.input("x", (1, 2, 5, 5))
    with pytest.raises(OpAttributeError, match="mode must be one of max, avg, got 'sum'"):
        g.pool2d(x, "sum", 2)
    with pytest.raises(OpAttributeError, match=r"pads \[2, 2, 2, 2\] must each be smaller than the dilated kernel"):
        g.pool2d(x, "max", 2, pads=2)
    with pytest.raises(OpAttributeError, match="dilations apply to max pooling only"):
        g.pool2d(x, "avg", 2, dilations=2)
    with pytest.raises(OpAttributeError, match=r"kernel must be 2 integers >= 1, got \[0, 2\]"):
        g.pool2d(x, "max", (0, 2))
    with pytest.raises(ShapeError, match="smaller than the kernel"):
        g.pool2d(x, "max", 6)
    with pytest.raises(ShapeError, match=r"pool2d needs x \[N, C, H, W\]"):
        g.pool2d(g.input("x3", (2, 5, 5)), "max", 2)


def test_pool_strides_default_to_the_kernel():
    g = Graph()
    assert g.pool2d(g.input("x", (1, 1, 8, 6)), "max", (2, 3)).dims == (1, 1, 4, 2)

"""Linear (affine) quantization: ONNX QuantizeLinear / DequantizeLinear.

The scale is a rank-0 tensor (per-tensor quantization) or a 1-D tensor with one
entry per index of ``axis`` (per-axis, e.g. per output channel); the optional zero
point has the scale's dims. ONNX's blocked quantization (``block_size``) is not
supported.
"""
from __future__ import annotations

import numpy as np

from ...errors import DTypeError, OpAttributeError, ShapeError
from ..dtypes import FLOATS, DType
from ..node import Value
from ..schema import Attr, op
from ..shape import Shape, normalize_axis
from .nn import expect_like, value_like

__all__ = ["QUANTIZED", "DEQUANTIZABLE"]

QUANTIZED = frozenset({DType.I8, DType.U8})  # what quantize produces
DEQUANTIZABLE = QUANTIZED | {DType.I32}  # what dequantize reads (i32: e.g. int32 bias / accumulators)

_AXIS = Attr("int", 1, "the axis a 1-D scale runs along (ignored for a rank-0 scale)")


def _check_scale(kind: str, a, x: Shape, scale: Shape, zero_point: "Shape | None") -> None:
    """A rank-0 scale, or a 1-D one matching ``x`` along ``axis`` (then resolved)."""
    if scale.rank == 1:
        a.axis = normalize_axis(a.axis, x.rank, f"{kind} axis")
        if scale.dims[0] != x.dims[a.axis]:
            raise ShapeError(f"{kind}: a per-axis scale needs {x.dims[a.axis]} entries (x {list(x.dims)} along "
                             f"axis {a.axis}), got {scale.dims[0]}")
    elif scale.rank != 0:
        raise ShapeError(f"{kind} scale must be rank 0 (per tensor) or 1-D (per axis), got {list(scale.dims)}")
    if zero_point is not None and zero_point.dims != scale.dims:
        raise ShapeError(f"{kind} zero_point must have the scale's dims {list(scale.dims)}, "
                         f"got {list(zero_point.dims)}")


@op("quantize", inputs=("x", "scale", "zero_point?"), dtypes=FLOATS, attrs={
    "axis": _AXIS,
    "to": Attr("dtype", None, "output dtype when there is no zero point: i8 (default) or u8", optional=True)})
def quantize(a, x, scale, zero_point=None):
    """``q = saturate(round(x / scale) + zero_point)`` (ONNX QuantizeLinear).

    ``x / scale`` is computed in x's dtype (16-bit floats in f32), rounded half to
    even, offset by the zero point (default 0) and clamped to the output range:
    ``[-128, 127]`` for i8, ``[0, 255]`` for u8. The output dtype is the zero point's,
    or ``to`` without one (default i8); ``to`` is stored resolved. ``scale`` has x's
    dtype; a scale <= 0 and NaN inputs are undefined.
    """
    expect_like("quantize", "scale", x, scale)
    _check_scale("quantize", a, x, scale, zero_point)
    out = zero_point.dtype if zero_point is not None else (a.to or DType.I8)
    if out not in QUANTIZED:
        raise DTypeError(f"quantize produces i8 or u8, got {'zero_point' if zero_point is not None else 'to'} {out}")
    if a.to is not None and a.to is not out:
        raise OpAttributeError(f"quantize to={a.to} disagrees with the zero point's dtype {out}")
    a.to = out
    return x.with_dtype(out)


@op("dequantize", inputs=("q", "scale", "zero_point?"), dtypes=DEQUANTIZABLE, attrs={"axis": _AXIS})
def dequantize(a, q, scale, zero_point=None):
    """``y = (q - zero_point) * scale`` in the scale's float dtype (ONNX DequantizeLinear).

    The difference is exact (integer arithmetic), then converted to the scale's dtype
    and multiplied. ``zero_point`` (default 0) has q's dtype.
    """
    if scale.dtype not in FLOATS:
        raise DTypeError(f"dequantize scale must be a float dtype, got {scale.dtype}")
    if zero_point is not None and zero_point.dtype is not q.dtype:
        raise DTypeError(f"dequantize zero_point must have q's dtype {q.dtype}, got {zero_point.dtype}")
    _check_scale("dequantize", a, q, scale, zero_point)
    return q.with_dtype(scale.dtype)


class QuantBuilders:
    def quantize(self, x, scale, zero_point=None, *, axis=1, to=None, shape=None, name=None):
        """Affine quantization to i8/u8 (see the ``quantize`` op kind). Numbers and
        arrays given for ``scale`` take x's dtype; a zero point given as Python ints
        takes ``to`` (default i8)."""
        x = self.as_value(x)
        ins = [x, value_like(self, x, scale)]
        if zero_point is not None:
            ins.append(self._zero_point(zero_point, to or DType.I8))
        return self.add_node("quantize", ins, {"axis": axis, "to": to}, shape=shape, name=name)

    def dequantize(self, q, scale, zero_point=None, *, axis=1, shape=None, name=None):
        """Affine dequantization (see the ``dequantize`` op kind). A zero point given
        as Python ints takes q's dtype; a scale given as Python floats is f32."""
        q = self.as_value(q)
        ins = [q, self.as_value(scale)]
        if zero_point is not None:
            ins.append(self._zero_point(zero_point, q.dtype))
        return self.add_node("dequantize", ins, {"axis": axis}, shape=shape, name=name)

    def _zero_point(self, zero_point, default_dtype):
        """Values and integer numpy arrays keep their dtype; Python ints get ``default_dtype``."""
        if isinstance(zero_point, Value) or (isinstance(zero_point, (np.ndarray, np.generic))
                                             and zero_point.dtype.kind in "iu"):
            return self.as_value(zero_point)
        return self.as_value(zero_point, default_dtype)

"""Convolution, transposed convolution and pooling over channels-first (NCHW) tensors.

Window geometry follows ONNX: ``strides`` and ``dilations`` have one entry per spatial
axis, ``pads`` lists every axis's begin padding and then every axis's end padding
(``(top, left, bottom, right)`` in 2-D). The shape rules store them resolved, so
backends never see ``None``. The builders also accept a single int for each.
"""
from __future__ import annotations

from typing import Sequence

from ...errors import OpAttributeError, ShapeError
from ..dtypes import FLOATS
from ..schema import Attr, op
from ..shape import Shape
from .nn import expect_like, value_like

__all__ = ["sliding_output_size", "POOL_MODES"]

POOL_MODES = ("max", "avg")

_GEOMETRY = {
    "strides": Attr("ints", None, "step per spatial axis (default 1)", optional=True),
    "pads": Attr("ints", None, "begin paddings, then end paddings (default 0)", optional=True),
    "dilations": Attr("ints", None, "kernel element spacing per spatial axis (default 1)", optional=True),
}


def sliding_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int,
                        ceil_mode: bool = False) -> int:
    """How many windows of ``kernel`` taps (``dilation`` apart) fit along an axis of
    ``size`` padded by ``pad_begin``/``pad_end``, stepping by ``stride``.

    Floor mode counts windows that lie inside the padded axis. Ceil mode also counts a
    last partial window, unless it would start in the end padding (torch and ONNX rule).
    """
    span = size + pad_begin + pad_end - (kernel - 1) * dilation - 1
    count = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (count - 1) * stride >= size + pad_begin:
        count -= 1
    return count


def pool_geometry(in_dims, kernel, strides, dilations, pads, ceil_mode):
    """``(out_dims, end_pads)`` of a pooling window: the output dims, and per axis the end
    padding that covers every window, ceil mode's last partial window included."""
    out_dims = tuple(sliding_output_size(size, k, s, d, pb, pe, ceil_mode) for size, k, s, d, pb, pe in
                     zip(in_dims, kernel, strides, dilations, pads[:len(in_dims)], pads[len(in_dims):]))
    reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip(out_dims, strides, kernel, dilations)]
    end = [max(pe, r - size - pb) for pe, r, size, pb in zip(pads[len(in_dims):], reach, in_dims, pads[:len(in_dims)])]
    return out_dims, end


def _geometry(kind: str, a, spatial: int) -> None:
    """Resolve ``strides``/``pads``/``dilations`` for ``spatial`` axes and check them."""
    for name, length, default, low in (("strides", spatial, 1, 1), ("dilations", spatial, 1, 1),
                                       ("pads", 2 * spatial, 0, 0)):
        value = getattr(a, name)
        value = (default,) * length if value is None else value
        if len(value) != length or min(value, default=low) < low:
            raise OpAttributeError(f"{kind} {name} must be {length} integer(s) >= {low}, got {list(value)}")
        setattr(a, name, tuple(value))


def _output_dims(kind: str, a, in_dims: Sequence[int], kernel: Sequence[int], ceil_mode: bool = False):
    n = len(in_dims)
    out = tuple(sliding_output_size(size, k, s, d, pb, pe, ceil_mode) for size, k, s, d, pb, pe in
                zip(in_dims, kernel, a.strides, a.dilations, a.pads[:n], a.pads[n:]))
    if min(out, default=1) < 1:
        raise ShapeError(f"{kind}: the padded input {list(in_dims)} (pads {list(a.pads)}) is smaller than "
                         f"the kernel {list(kernel)} with dilations {list(a.dilations)}")
    return out


def _check_kernel(kind: str, w: Shape) -> None:
    if min(w.dims[2:], default=1) < 1:
        raise ShapeError(f"{kind} kernel dims must be >= 1, got w {list(w.dims)}")


def _check_groups(kind: str, groups: int, **channels: int) -> None:
    if groups < 1 or any(c % groups for c in channels.values()):
        raise OpAttributeError(f"{kind} groups must be >= 1 and divide the channel counts {channels}, "
                               f"got groups={groups}")


def _check_bias(kind: str, x: Shape, bias: "Shape | None", channels: int) -> None:
    if bias is not None:
        expect_like(kind, "bias", x, bias, (channels,))


@op("conv", inputs=("x", "w", "bias?"), dtypes=FLOATS,
    attrs={**_GEOMETRY, "groups": Attr("int", 1, "channel groups; C and Co must be multiples of it")})
def conv(a, x, w, bias=None):
    """1-D or 2-D convolution (cross-correlation, as ONNX Conv and torch conv1d/conv2d).

    ``x [N, C, *in]`` (rank 3 or 4), ``w [Co, C/groups, *k]``, optional ``bias [Co]``.
    ``x`` is zero-padded by ``pads``; output channel o of group g = o // (Co/groups)
    sees input channels ``g*C/groups ..``:
    ``y[n, o, p] = bias[o] + sum_{c, t} x_pad[n, g*C/groups + c, p*stride + t*dilation] * w[o, c, t]``
    (per spatial axis). Output size per axis:
    ``floor((in + pad_begin + pad_end - dilation*(k-1) - 1) / stride) + 1``; it must be >= 1.
    """
    if x.rank not in (3, 4) or w.rank != x.rank:
        raise ShapeError(f"conv needs x [N, C, L] or [N, C, H, W] and a kernel w of the same rank, "
                         f"got x {list(x.dims)}, w {list(w.dims)}")
    expect_like("conv", "w", x, w)
    _geometry("conv", a, x.rank - 2)
    _check_kernel("conv", w)
    co, c_per_group = w.dims[:2]
    _check_groups("conv", a.groups, Co=co)
    if c_per_group * a.groups != x.dims[1]:
        raise ShapeError(f"conv: x has {x.dims[1]} channels but w {list(w.dims)} with groups={a.groups} "
                         f"expects {c_per_group * a.groups}")
    _check_bias("conv", x, bias, co)
    return Shape((x.dims[0], co) + _output_dims("conv", a, x.dims[2:], w.dims[2:]), x.dtype)


@op("conv_transpose2d", inputs=("x", "w", "bias?"), dtypes=FLOATS, attrs={
    **_GEOMETRY,
    "output_padding": Attr("ints", None, "extra size at the end of each spatial axis (default 0)", optional=True),
    "groups": Attr("int", 1, "channel groups; Ci and Co must be multiples of it")})
def conv_transpose2d(a, x, w, bias=None):
    """2-D transposed convolution (torch conv_transpose2d, ONNX ConvTranspose): the
    adjoint of ``conv`` with the same geometry.

    ``x [N, Ci, H, W]``, ``w [Ci, Co/groups, kh, kw]``, optional ``bias [Co]``. Every
    input pixel scatters ``x[n, i, h, w] * w[i, o, th, tw]`` to position
    ``(h*stride + th*dilation, w*stride + tw*dilation)`` of a full-size output, which
    is then cropped by ``pads`` (begin..., end...); input channel i of group g writes
    output channels ``g*Co/groups ..``. Output size per axis:
    ``(in - 1)*stride - pad_begin - pad_end + dilation*(k-1) + output_padding + 1``
    (must be >= 1). ``output_padding`` (which only disambiguates the size) must be
    smaller than the stride or the dilation of its axis, as torch requires.
    """
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"conv_transpose2d needs x [N, Ci, H, W] and w [Ci, Co/groups, kh, kw], "
                         f"got x {list(x.dims)}, w {list(w.dims)}")
    expect_like("conv_transpose2d", "w", x, w)
    _geometry("conv_transpose2d", a, 2)
    _check_kernel("conv_transpose2d", w)
    ci, co_per_group = w.dims[:2]
    if ci != x.dims[1]:
        raise ShapeError(f"conv_transpose2d: x has {x.dims[1]} channels but w {list(w.dims)} expects {ci}")
    _check_groups("conv_transpose2d", a.groups, Ci=ci)
    co = co_per_group * a.groups
    _check_bias("conv_transpose2d", x, bias, co)
    a.output_padding = tuple(a.output_padding or (0, 0))
    if len(a.output_padding) != 2 or not all(0 <= extra < max(s, d) for extra, s, d in
                                             zip(a.output_padding, a.strides, a.dilations)):
        raise OpAttributeError(f"conv_transpose2d output_padding must be 2 integers, each >= 0 and smaller than "
                               f"its stride or dilation; got {list(a.output_padding)} with strides "
                               f"{list(a.strides)}, dilations {list(a.dilations)}")
    out = []
    for axis, (size, k, s, d, pb, pe, extra) in enumerate(zip(
            x.dims[2:], w.dims[2:], a.strides, a.dilations, a.pads[:2], a.pads[2:], a.output_padding)):
        size = (size - 1) * s - pb - pe + d * (k - 1) + extra + 1
        if size < 1 or x.dims[2 + axis] < 1:
            raise ShapeError(f"conv_transpose2d: input {list(x.dims)} with kernel {list(w.dims[2:])} and pads "
                             f"{list(a.pads)} gives no output along spatial axis {axis}")
        out.append(size)
    return Shape((x.dims[0], co) + tuple(out), x.dtype)


@op("pool2d", inputs="x", dtypes=FLOATS, attrs={
    "mode": Attr("str", doc="max | avg"),
    "kernel": Attr("ints", doc="window size (kh, kw)"),
    **_GEOMETRY,
    "count_include_pad": Attr("bool", False, "avg: count padding positions in the divisor"),
    "ceil_mode": Attr("bool", False, "round the output size up (see sliding_output_size)")})
def pool2d(a, x):
    """2-D max or average pooling of ``x [N, C, H, W]`` over windows of ``kernel``.

    ``strides`` default to ``kernel`` (torch's convention; ONNX's default is 1, so
    importers pass them explicitly). Output size per axis: see
    ``sliding_output_size``. Each padding must be smaller than the dilated kernel,
    so every window overlaps the padded input's interior.

    * ``max``: the maximum of the window's input elements; padding is ignored (it
      never wins), NaN propagates. ``dilations`` space the taps. A window that holds no
      input element (possible only with dilation) gives -inf.
    * ``avg``: the sum of the window's input elements divided by how many positions
      are counted: the window's input elements, plus its padding positions when
      ``count_include_pad``. Window positions beyond the end padding (reachable only in
      ceil mode) are never counted. ``dilations`` must be 1.
    """
    if x.rank != 4:
        raise ShapeError(f"pool2d needs x [N, C, H, W], got {list(x.dims)}")
    if a.mode not in POOL_MODES:
        raise OpAttributeError(f"pool2d mode must be one of {', '.join(POOL_MODES)}, got {a.mode!r}")
    if len(a.kernel) != 2 or min(a.kernel) < 1:
        raise OpAttributeError(f"pool2d kernel must be 2 integers >= 1, got {list(a.kernel)}")
    if a.strides is None:
        a.strides = a.kernel
    _geometry("pool2d", a, 2)
    if a.mode == "avg" and a.dilations != (1, 1):
        raise OpAttributeError(f"pool2d dilations apply to max pooling only; avg got {list(a.dilations)}")
    extents = [(k - 1) * d + 1 for k, d in zip(a.kernel, a.dilations)]
    if any(p >= extents[i % 2] for i, p in enumerate(a.pads)):
        raise OpAttributeError(f"pool2d pads {list(a.pads)} must each be smaller than the dilated kernel "
                               f"{extents}")
    return x.with_dims(x.dims[:2] + _output_dims("pool2d", a, x.dims[2:], a.kernel, a.ceil_mode))


def _spread(value, n):
    """An int given for a per-axis attribute means that value on all ``n`` entries."""
    return (value,) * n if isinstance(value, int) else value


class ConvBuilders:
    def conv(self, x, w, bias=None, *, strides=None, pads=None, dilations=None, groups=1, shape=None, name=None):
        """1-D / 2-D convolution (see the ``conv`` op kind)."""
        x = self.as_value(x)
        n = x.rank - 2
        attrs = {"strides": _spread(strides, n), "pads": _spread(pads, 2 * n),
                 "dilations": _spread(dilations, n), "groups": groups}
        return self.add_node("conv", self._conv_inputs(x, w, bias), attrs, shape=shape, name=name)

    def conv_transpose2d(self, x, w, bias=None, *, strides=None, pads=None, dilations=None, output_padding=None,
                         groups=1, shape=None, name=None):
        """2-D transposed convolution (see the ``conv_transpose2d`` op kind)."""
        x = self.as_value(x)
        attrs = {"strides": _spread(strides, 2), "pads": _spread(pads, 4), "dilations": _spread(dilations, 2),
                 "output_padding": _spread(output_padding, 2), "groups": groups}
        return self.add_node("conv_transpose2d", self._conv_inputs(x, w, bias), attrs, shape=shape, name=name)

    def pool2d(self, x, mode, kernel, *, strides=None, pads=None, dilations=None, count_include_pad=False,
               ceil_mode=False, shape=None, name=None):
        """2-D max / avg pooling (see the ``pool2d`` op kind)."""
        attrs = {"mode": mode, "kernel": _spread(kernel, 2), "strides": _spread(strides, 2),
                 "pads": _spread(pads, 4), "dilations": _spread(dilations, 2),
                 "count_include_pad": count_include_pad, "ceil_mode": ceil_mode}
        return self.add_node("pool2d", (self.as_value(x),), attrs, shape=shape, name=name)

    def _conv_inputs(self, x, w, bias):
        ins = [x, value_like(self, x, w)]
        return ins if bias is None else ins + [value_like(self, x, bias)]

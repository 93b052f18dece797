"""How each RLX dtype lives in GPU memory, and the host <-> device conversions.

WGSL storage buffers hold 32-bit words (and f16 with the ``shader-f16`` feature), so:

* f32, i32, u32 are stored as themselves; f16 as f16 where the device has ``shader-f16``;
* bool is widened to one u32 word per element (0 or 1): WGSL has no byte stores;
* c64 is a ``vec2<f32>`` (re, im) and i64 a ``vec2<u32>`` (low, high word), which is
  numpy's own byte layout;
* every other dtype (f64, c128, bf16, i8, ...) is kept as numpy's raw bytes. Kernels that
  only move whole elements handle every dtype whose element is a multiple of 4 bytes;
  nothing computes on the rest, so they can only pass through (a graph input returned
  as an output, a control-flow operand).

Every value's device region is a multiple of 4 bytes and at least 4 bytes long (empty
tensors too), because storage bindings and buffer copies work in whole words.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlx_core.ir import DType, Shape

__all__ = ["Layout", "layout", "exact_nbytes", "device_nbytes", "to_device", "from_device", "COMPUTE_TYPES"]

# dtype -> WGSL type of one computed value (f16 is computed in f32 and rounded per op; i64
# through the exact emulation of rlx_wgpu.codegen.int64).
COMPUTE_TYPES = {DType.F32: "f32", DType.F16: "f32", DType.I32: "i32", DType.U32: "u32",
                 DType.BOOL: "bool", DType.C64: "vec2<f32>", DType.I64: "vec2<u32>"}
_STORAGE_TYPES = {DType.F32: "f32", DType.F16: "f16", DType.I32: "i32", DType.U32: "u32",
                  DType.BOOL: "u32", DType.C64: "vec2<f32>", DType.I64: "vec2<u32>"}


@dataclass(frozen=True)
class Layout:
    """``itemsize``: device bytes per element. ``storage``: the WGSL element type of a typed
    binding (None: raw words only). ``compute``: the WGSL type values are computed in
    (None: kernels only move these elements)."""

    dtype: DType
    itemsize: int
    storage: str | None
    compute: str | None

    @property
    def words(self) -> int:
        """u32 words per element, for kernels that move elements as words (0: not word-sized)."""
        return self.itemsize // 4 if self.itemsize % 4 == 0 else 0


def layout(dtype: DType, f16: bool = True) -> Layout:
    """The device layout of ``dtype``; ``f16``: whether the device has ``shader-f16``."""
    if dtype is DType.F16 and not f16:
        return Layout(dtype, 2, None, None)
    itemsize = 4 if dtype is DType.BOOL else dtype.itemsize
    return Layout(dtype, itemsize, _STORAGE_TYPES.get(dtype), COMPUTE_TYPES.get(dtype))


def exact_nbytes(shape: Shape) -> int:
    """Bytes of ``shape``'s elements on the device (bool words included), unpadded."""
    return shape.size * (4 if shape.dtype is DType.BOOL else shape.dtype.itemsize)


def device_nbytes(shape: Shape) -> int:
    """Bytes of ``shape``'s device region: whole words, at least one."""
    return max(4, (exact_nbytes(shape) + 3) // 4 * 4)


def to_device(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """``arr`` as the bytes of its device region (a uint8 array of ``device_nbytes``)."""
    arr = np.ascontiguousarray(arr, dtype=dtype.np)
    if dtype is DType.BOOL:
        arr = arr.astype(np.uint32)
    raw = arr.reshape(-1).view(np.uint8)
    pad = device_nbytes(Shape(arr.shape, dtype)) - raw.size
    return np.concatenate([raw, np.zeros(pad, np.uint8)]) if pad else raw


def from_device(raw, shape: Shape, out: np.ndarray | None = None) -> np.ndarray:
    """The host array of ``shape`` held by the device bytes ``raw`` (written into ``out`` if given)."""
    words = np.frombuffer(raw, np.uint8)
    dtype = shape.dtype
    if dtype is DType.BOOL:
        values = words[:shape.size * 4].view(np.uint32) != 0
    else:
        values = words[:shape.nbytes].view(dtype.np)
    values = values.reshape(shape.dims)
    if out is None:
        return values.copy()
    np.copyto(out, values)
    return out

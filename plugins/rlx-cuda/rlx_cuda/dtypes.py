"""How each RLX dtype lives on the device: its storage type in memory, the type kernels
compute in, how a stored value is loaded and how a computed one is stored.

16-bit floats are stored as raw bits (``unsigned short``) and computed in ``float``,
which is the reference rule (compute in f32, round once per op). bfloat16 device
arrays are ``uint16`` arrays holding the bits: CuPy 13 has no bfloat16 dtype, so the
plugin never asks CuPy to interpret them. bool is one byte holding 0 or 1, as in numpy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rlx_core.ir import DType

__all__ = ["DeviceType", "device_type", "storage_np", "CUDA_R", "index_ctype"]


@dataclass(frozen=True)
class DeviceType:
    """``store``: C type in memory; ``compute``: C type of values in registers.
    ``load``/``store_expr`` are format strings over ``{}`` (a stored / computed value)."""

    store: str
    compute: str
    load: str = "{}"
    store_expr: str = "{}"

    def load_from(self, expr: str) -> str:
        return self.load.format(expr)

    def to_store(self, expr: str) -> str:
        return self.store_expr.format(expr)


_TYPES = {
    DType.F32: DeviceType("float", "float"),
    DType.F64: DeviceType("double", "double"),
    DType.F16: DeviceType("unsigned short", "float", "rlx_h2f({})", "rlx_f2h({})"),
    DType.BF16: DeviceType("unsigned short", "float", "rlx_bf2f({})", "rlx_f2bf({})"),
    DType.I8: DeviceType("signed char", "signed char"),
    DType.I16: DeviceType("short", "short"),
    DType.I32: DeviceType("int", "int"),
    DType.I64: DeviceType("long long", "long long"),
    DType.U8: DeviceType("unsigned char", "unsigned char"),
    DType.U32: DeviceType("unsigned int", "unsigned int"),
    DType.BOOL: DeviceType("unsigned char", "bool", "({} != 0)", "(unsigned char)({})"),
    DType.C64: DeviceType("rlx_c64", "rlx_c64"),
    DType.C128: DeviceType("rlx_c128", "rlx_c128"),
}

# numpy dtype of the CuPy arrays holding each RLX dtype (bf16: its bits as uint16).
_STORAGE_NP = {d: (np.dtype(np.uint16) if d is DType.BF16 else d.np) for d in DType}

# cudaDataType_t values (library_types.h) for the dtypes cuBLAS / cuFFT take.
CUDA_R = {DType.F32: 0, DType.F64: 1, DType.F16: 2, DType.BF16: 14, DType.C64: 4, DType.C128: 5}


def device_type(dtype: "DType | str") -> DeviceType:
    return _TYPES[DType.of(dtype)]


def storage_np(dtype: "DType | str") -> np.dtype:
    """The numpy dtype of a device (CuPy) array holding values of ``dtype``."""
    return _STORAGE_NP[DType.of(dtype)]


def index_ctype(extent: int) -> str:
    """The C integer type for offsets and counts up to ``extent`` (32 bits when it fits)."""
    return "int" if extent < 2**31 else "long long"

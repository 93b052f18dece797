"""Element types of RLX tensors, their numpy equivalents, and type promotion.

Promotion (used by the builder when a binary op mixes dtypes; the op itself then sees
equal dtypes because the builder inserts explicit casts):

* equal dtypes stay as they are;
* ``bool`` promotes to the other operand's dtype;
* two integers promote to the narrowest integer holding both ranges
  (``u8+i8 -> i16``, ``u32+i32 -> i64``; ``u32+i64 -> i64``);
* integer with float gives the float (integers never widen a float: ``i64+f16 -> f16``,
  as in JAX and PyTorch, unlike numpy's value-range rule);
* two floats give the wider; ``f16+bf16 -> f32`` (neither holds the other);
* complex with anything gives complex wide enough for the other operand's float part
  (``c64+f64 -> c128``).
"""
from __future__ import annotations

import enum
import sys

import numpy as np

from ..errors import DTypeError

__all__ = ["DType", "promote", "FLOATS", "INTS", "NUMERIC"]


class DType(enum.Enum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    F64 = "f64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    U8 = "u8"
    U32 = "u32"
    BOOL = "bool"
    C64 = "c64"
    C128 = "c128"

    # --- properties -------------------------------------------------------------
    @property
    def label(self) -> str:
        return self.value

    @property
    def np(self) -> np.dtype:
        return _NP[self] if self is not DType.BF16 else _bfloat16()

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in FLOATS

    @property
    def is_low_float(self) -> bool:
        """16-bit floats: computed in f32 by the reference and rounded once per op."""
        return self in (DType.F16, DType.BF16)

    @property
    def is_int(self) -> bool:
        return self in INTS

    @property
    def is_signed(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32, DType.I64) or self.is_float or self.is_complex

    @property
    def is_complex(self) -> bool:
        return self in (DType.C64, DType.C128)

    @property
    def is_bool(self) -> bool:
        return self is DType.BOOL

    @property
    def real(self) -> "DType":
        """The real dtype of a complex dtype (c64 -> f32); other dtypes map to themselves."""
        return {DType.C64: DType.F32, DType.C128: DType.F64}.get(self, self)

    @property
    def complex(self) -> "DType":
        """The complex dtype whose parts have this float dtype (f64 -> c128, else c64)."""
        return DType.C128 if self in (DType.F64, DType.C128) else DType.C64

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    def __str__(self) -> str:
        return self.value

    # --- conversion ---------------------------------------------------------------
    @classmethod
    def of(cls, x: "DType | str | np.dtype | type") -> "DType":
        """Accept a DType, a label or alias ('f32', 'float32', 'half'...) or a numpy dtype."""
        if isinstance(x, DType):
            return x
        if isinstance(x, str):
            key = x.strip().lower()
            if key in _ALIASES:
                return _ALIASES[key]
        try:
            npd = np.dtype(x)
        except TypeError:
            npd = None
        if npd is not None and npd in _FROM_NP:
            return _FROM_NP[npd]
        if npd is not None and "ml_dtypes" in sys.modules and npd == _bfloat16():
            return DType.BF16  # a bfloat16 array exists only once ml_dtypes is imported
        raise DTypeError(
            f"unknown dtype {x!r}; expected one of {', '.join(d.value for d in DType)}")


def _bfloat16() -> np.dtype:
    """numpy's bfloat16 from ml_dtypes, imported on first use: the import costs ~0.4 s
    and most programs never touch bfloat16."""
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


_NP = {
    DType.F32: np.dtype(np.float32), DType.F16: np.dtype(np.float16), DType.F64: np.dtype(np.float64),
    DType.I8: np.dtype(np.int8), DType.I16: np.dtype(np.int16),
    DType.I32: np.dtype(np.int32), DType.I64: np.dtype(np.int64),
    DType.U8: np.dtype(np.uint8), DType.U32: np.dtype(np.uint32),
    DType.BOOL: np.dtype(np.bool_), DType.C64: np.dtype(np.complex64),
    DType.C128: np.dtype(np.complex128),
}
_FROM_NP = {v: k for k, v in _NP.items()}
_ALIASES = {d.value: d for d in DType} | {
    "float32": DType.F32, "float": DType.F32, "float16": DType.F16, "half": DType.F16,
    "bfloat16": DType.BF16, "float64": DType.F64, "double": DType.F64,
    "int8": DType.I8, "int16": DType.I16, "int32": DType.I32, "int": DType.I32,
    "int64": DType.I64, "long": DType.I64, "uint8": DType.U8, "uint32": DType.U32,
    "bool_": DType.BOOL, "complex64": DType.C64, "complex128": DType.C128,
}

FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})
INTS = frozenset({DType.I8, DType.I16, DType.I32, DType.I64, DType.U8, DType.U32})
COMPLEX = frozenset({DType.C64, DType.C128})
NUMERIC = FLOATS | INTS | COMPLEX

# Integer ranges as (bits, signed): the narrowest common type is looked up in this order.
_INT_ORDER = [DType.I8, DType.U8, DType.I16, DType.I32, DType.U32, DType.I64]
_FLOAT_ORDER = [DType.F16, DType.BF16, DType.F32, DType.F64]


def _int_holds(wide: DType, narrow: DType) -> bool:
    lo_w, hi_w = _int_range(wide)
    lo_n, hi_n = _int_range(narrow)
    return lo_w <= lo_n and hi_n <= hi_w


def _int_range(d: DType) -> tuple[int, int]:
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


def promote(a: DType, b: DType) -> DType:
    """The dtype both operands are cast to before a binary op (see module docstring)."""
    a, b = DType.of(a), DType.of(b)
    if a is b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_complex or b.is_complex:
        wide = DType.F64 in (a.real, b.real) or DType.C128 in (a, b)
        return DType.C128 if wide else DType.C64
    if a.is_float and b.is_float:
        if {a, b} == {DType.F16, DType.BF16}:
            return DType.F32
        return max(a, b, key=_FLOAT_ORDER.index)
    if a.is_float:
        return a
    if b.is_float:
        return b
    return next(c for c in _INT_ORDER if _int_holds(c, a) and _int_holds(c, b))

"""RLX dtypes in OpenCL C: storage types, compute types, loads, stores, rounding, literals.

Every dtype is stored exactly as numpy lays it out, so host arrays cross the boundary as
raw bytes: ``f16`` as ``half`` (read with ``vload_half``, written with ``vstore_half_rte``:
core OpenCL, no ``cl_khr_fp16`` needed), ``bf16`` as ``ushort`` (the high half of an f32),
``bool`` as ``uchar`` 0/1, ``c64``/``c128`` as ``float2``/``double2`` (real, imaginary).

Sixteen-bit floats compute in ``float`` and are rounded to their dtype after every op
(``rt_f16``/``rt_bf16``), the reference's rule. Integers compute in their own type;
arithmetic that may overflow goes through the unsigned type of the same width, so it
wraps (signed overflow is undefined in C).
"""
from __future__ import annotations

import math

import numpy as np

from rlx_core.ir import DType

__all__ = ["STORAGE", "COMPUTE", "UNSIGNED", "ctype", "cstore", "load", "store", "round_to", "literal",
           "is_complex", "real_ctype", "zero", "one", "lowest", "highest", "needs_fp64"]

STORAGE = {DType.F32: "float", DType.F64: "double", DType.F16: "half", DType.BF16: "ushort",
           DType.I8: "char", DType.I16: "short", DType.I32: "int", DType.I64: "long",
           DType.U8: "uchar", DType.U32: "uint", DType.BOOL: "uchar",
           DType.C64: "float2", DType.C128: "double2"}
COMPUTE = {**STORAGE, DType.F16: "float", DType.BF16: "float"}
UNSIGNED = {DType.I8: "uchar", DType.I16: "ushort", DType.I32: "uint", DType.I64: "ulong",
            DType.U8: "uchar", DType.U32: "uint", DType.BOOL: "uchar"}


def ctype(dt: DType) -> str:
    """The C type values of ``dt`` are computed in."""
    return COMPUTE[dt]


def cstore(dt: DType) -> str:
    """The C element type of a buffer holding ``dt``."""
    return STORAGE[dt]


def is_complex(dt: DType) -> bool:
    return dt in (DType.C64, DType.C128)


def real_ctype(dt: DType) -> str:
    return {DType.C64: "float", DType.C128: "double"}.get(dt, ctype(dt))


def needs_fp64(dt: DType) -> bool:
    return dt in (DType.F64, DType.C128)


def load(dt: DType, ptr: str, idx: str) -> str:
    """An expression of compute type reading element ``idx`` of buffer ``ptr``."""
    if dt is DType.F16:
        return f"vload_half({idx}, {ptr})"
    if dt is DType.BF16:
        return f"bf16_load({ptr}[{idx}])"
    return f"{ptr}[{idx}]"


def store(dt: DType, ptr: str, idx: str, value: str) -> str:
    """A statement writing compute-type ``value`` to element ``idx`` of ``ptr``."""
    if dt is DType.F16:
        return f"vstore_half_rte({value}, {idx}, {ptr});"
    if dt is DType.BF16:
        return f"{ptr}[{idx}] = bf16_bits({value});"
    return f"{ptr}[{idx}] = {value};"


def round_to(dt: DType, expr: str) -> str:
    """``expr`` (computed in float) rounded to a 16-bit float dtype; others unchanged."""
    if dt is DType.F16:
        return f"rt_f16({expr})"
    if dt is DType.BF16:
        return f"rt_bf16({expr})"
    return expr


def _float_lit(value: float, double: bool) -> str:
    if math.isnan(value):
        return "(double)NAN" if double else "NAN"
    if math.isinf(value):
        inf = "(double)INFINITY" if double else "INFINITY"
        return inf if value > 0 else f"(-{inf})"
    text = float(value).hex()
    return f"({text})" if double else f"({text}f)"


def literal(dt: DType, value) -> str:
    """An exact C literal of ``value`` in ``dt``'s compute type."""
    if dt in (DType.C64, DType.C128):
        v = complex(value)
        double = dt is DType.C128
        return f"(({ctype(dt)})({_float_lit(v.real, double)}, {_float_lit(v.imag, double)}))"
    if dt is DType.F64:
        return _float_lit(float(value), True)
    if dt.is_float:
        return _float_lit(float(np.float32(value)), False)
    if dt is DType.BOOL:
        return "((uchar)1)" if bool(value) else "((uchar)0)"
    v = int(value)
    if dt is DType.I64:
        return f"((long){v}L)" if v != -2**63 else "((long)(-9223372036854775807L - 1L))"
    if dt is DType.U32:
        return f"((uint){v}u)"
    if dt is DType.I32 and v == -2**31:
        return "((int)(-2147483647 - 1))"
    return f"(({ctype(dt)}){v})"


def zero(dt: DType) -> str:
    return literal(dt, 0)


def one(dt: DType) -> str:
    return literal(dt, 1)


def lowest(dt: DType) -> str:
    """The identity of max: -inf for floats, the minimum for integers, 0 for bool."""
    if dt.is_float:
        return literal(dt, -math.inf)
    if dt is DType.BOOL:
        return literal(dt, 0)
    return literal(dt, int(np.iinfo(dt.np).min))


def highest(dt: DType) -> str:
    if dt.is_float:
        return literal(dt, math.inf)
    if dt is DType.BOOL:
        return literal(dt, 1)
    return literal(dt, int(np.iinfo(dt.np).max))

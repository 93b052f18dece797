"""Per-dtype tolerances and the comparison every conformance check uses.

| dtype        | rtol  | atol  |
|--------------|-------|-------|
| f64, c128    | 1e-9  | 1e-11 |
| f32, c64     | 1e-4  | 1e-5  |
| f16          | 1e-2  | 1e-2  |
| bf16         | 4e-2  | 4e-2  |
| ints, bool   | exact | exact |

A case may scale the float tolerances (``Case.tol``) when its op accumulates long
sums. NaNs must match NaNs; infinities must match exactly.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType

__all__ = ["TOLERANCES", "tolerance", "assert_close", "mismatch_report"]

TOLERANCES = {
    DType.F64: (1e-9, 1e-11), DType.C128: (1e-9, 1e-11),
    DType.F32: (1e-4, 1e-5), DType.C64: (1e-4, 1e-5),
    DType.F16: (1e-2, 1e-2), DType.BF16: (4e-2, 4e-2),
}


def tolerance(dtype: DType, scale: float = 1.0) -> tuple[float, float]:
    rtol, atol = TOLERANCES.get(dtype, (0.0, 0.0))
    return rtol * scale, atol * scale


def mismatch_report(actual: np.ndarray, expected: np.ndarray, dtype: DType, scale: float = 1.0) -> str | None:
    """None when ``actual`` matches ``expected`` within the dtype's tolerance; else why not."""
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)} != expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != expected {expected.dtype}"
    if expected.size == 0:
        return None
    rtol, atol = tolerance(dtype, scale)
    if rtol == 0 and atol == 0:
        bad = actual != expected
    else:
        a = actual.astype(np.complex128 if dtype.is_complex else np.float64)
        e = expected.astype(a.dtype)
        bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    idx = np.argwhere(bad)
    first = tuple(int(i) for i in idx[0])
    diff = ""
    if rtol or atol:
        with np.errstate(all="ignore"):
            err = np.abs(a - e)
            diff = f"; max abs err {np.nanmax(np.where(bad, err, 0)):.3g} (rtol={rtol:g}, atol={atol:g})"
    return (f"{int(bad.sum())}/{expected.size} elements differ{diff}; first at {list(first)}: "
            f"got {actual[first]!r}, expected {expected[first]!r}")


def assert_close(actual, expected, dtype: "DType | str | None" = None, scale: float = 1.0, what: str = "output"):
    expected = np.asarray(expected)
    dt = DType.of(dtype if dtype is not None else expected.dtype)
    why = mismatch_report(actual, expected, dt, scale)
    if why:
        raise AssertionError(f"{what}: {why}")

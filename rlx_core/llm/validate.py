"""The error raised for bad LLM-primitive settings, and the range checks that raise it.

Every constructor in ``rlx_core.llm`` checks its settings up front, so that a bad value
fails where it is given, with its name, the accepted range and the value given -- not
later, as a numpy error from deep inside a sampler or a cache.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

from ..errors import RlxError

__all__ = ["LLMConfigError", "check_int", "check_float"]


class LLMConfigError(RlxError, ValueError):
    """A sampler, KV cache or scheduler setting is of the wrong type or out of range."""


def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int, or LLMConfigError naming ``name`` if it is not an integer in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise LLMConfigError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise LLMConfigError(f"{name} must be in {_range(lo, hi)}, got {value}")
    return value


def check_float(name: str, value, lo: float | None = None, hi: float | None = None) -> float:
    """``value`` as a finite float, or LLMConfigError naming ``name`` if it is outside [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise LLMConfigError(f"{name} must be a finite number, got {value!r}")
    value = float(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise LLMConfigError(f"{name} must be in {_range(lo, hi)}, got {value}")
    return value


def _range(lo, hi) -> str:
    return f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"

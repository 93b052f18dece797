"""The errors raised for bad LLM-primitive settings and calls, and the checks that raise them.

Every constructor in ``rlx_core.llm`` checks its settings up front, so that a bad value
fails where it is given, with its name, the accepted range and the value given -- not
later, as a numpy error from deep inside a sampler or a cache. Calls that would corrupt
shared state (a K/V write outside the pool, a block freed twice, a step scheduled twice)
raise before they change anything.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

from ..errors import InputError, InputTypeError, ResourceError, RlxError
from ..runtime.memory_plan import host_memory_bytes

__all__ = ["LLMConfigError", "LLMStateError", "KVSlotError", "KVCacheMemoryError", "check_int", "check_float",
           "check_hashable", "check_host_memory"]


class LLMConfigError(RlxError, ValueError):
    """A sampler, KV cache or scheduler setting is of the wrong type or out of range."""


class LLMStateError(RlxError, RuntimeError):
    """A call out of order: a KV block freed more often than it is held (or a block of
    another pool), ``Scheduler.schedule()`` again before ``update()`` of its last step."""


class KVSlotError(InputError, ValueError):
    """K/V slots that are not integers inside the cache's pool (a negative slot would
    wrap around to another sequence's K/V)."""


class KVCacheMemoryError(ResourceError, LLMConfigError):
    """A KV cache or block pool larger than this machine's memory, refused before any of
    it is allocated; the message names the bytes."""


def check_host_memory(what: str, nbytes: int) -> None:
    """KVCacheMemoryError if ``nbytes`` exceed the host's physical memory."""
    capacity = host_memory_bytes()
    if nbytes > capacity:
        raise KVCacheMemoryError(f"{what} needs {nbytes} bytes ({nbytes / 2 ** 30:.1f} GiB), but this machine has "
                                 f"{capacity} bytes ({capacity / 2 ** 30:.1f} GiB) of memory")


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


def check_hashable(name: str, value):
    """``value``, or InputTypeError naming ``name`` if it cannot be a dict key (a list, say)."""
    try:
        hash(value)
    except TypeError:
        raise InputTypeError(f"{name} must be hashable (an int, str, tuple, ...), got {type(value).__name__} "
                             f"{value!r}") from None
    return value


def _range(lo, hi) -> str:
    return f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"

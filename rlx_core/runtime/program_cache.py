"""ProgramCache: a backend's own bounded cache of compiled programs, and the checking of
a backend's ``CompileOptions.backend`` knobs -- the pieces rlx-mlx and rlx-tpu share.

:class:`ProgramCache` maps a key the backend chooses (usually the graph's fingerprint,
the precision and whatever else changes the program) to its program; it is safe from
many threads and evicts the least recently used entry beyond ``capacity``. A program is
built outside the lock, so two threads missing one key at once may both build it (the
later one is kept); a build must therefore have no side effects beyond its result.

:func:`backend_knobs` checks ``options.backend`` against the backend's defaults: unknown
names and an ``outputs`` value not among the backend's output kinds raise PolicyError.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, Mapping, Sequence, TypeVar

from ..errors import PolicyError
from .options import CompileOptions

__all__ = ["ProgramCache", "backend_knobs"]

P = TypeVar("P")


class ProgramCache(Generic[P]):
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"ProgramCache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, P] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(self, key: Hashable, build: Callable[[], P]) -> P:
        """The program cached under ``key`` (now the most recently used), or ``build()``,
        cached under ``key``."""
        with self._lock:
            program = self._entries.get(key)
            if program is not None:
                self._entries.move_to_end(key)
                return program
        program = build()
        with self._lock:
            self._entries[key] = program
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return program

    def __len__(self) -> int:
        return len(self._entries)


def backend_knobs(backend: str, options: CompileOptions, defaults: Mapping[str, object],
                  output_kinds: Sequence[str]) -> dict:
    """``options.backend`` over ``defaults``: PolicyError when it names an option not in
    ``defaults`` or when its ``outputs`` is not one of ``output_kinds``."""
    unknown = sorted(set(options.backend) - set(defaults))
    if unknown:
        raise PolicyError(f"{backend} backend options {unknown} are unknown; it takes {sorted(defaults)}")
    knobs = {**defaults, **options.backend}
    if knobs["outputs"] not in output_kinds:
        raise PolicyError(f"{backend} backend option outputs={knobs['outputs']!r}; "
                          f"expected one of {', '.join(output_kinds)}")
    return knobs

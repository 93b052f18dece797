"""Numba kernels: loading them through the disk cache and specializing them for arrays.

Kernel modules -- the hand-written ``library.py`` and the generated fused kernels of
``codegen`` -- are written into ``rlx_cpu.cache.kernel_dir()`` and imported from
there, so that numba's ``cache=True`` keeps their machine code under
``$XDG_CACHE_HOME/rlx`` and a second process loads instead of compiling.

Importing this package imports numba (about 0.3 s); ``plugin.py`` never does.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import numba

from ..cache import ensure_source, kernel_dir

__all__ = ["library", "generated_kernel", "specialize", "is_compiled", "warm_up"]

log = logging.getLogger("rlx.cpu")
_lock = threading.RLock()
_modules: dict[Path, ModuleType] = {}
_entry_points: set[int] = set()  # ids of compiled entry points (they live as long as the process)


def _load(stem: str, source: str) -> ModuleType:
    """Import ``source`` from ``kernel_dir()/<stem>.py`` (once per process)."""
    with _lock:
        path = ensure_source(f"{stem}.py", source)
        module = _modules.get(path)
        if module is None:
            name = f"_rlx_cpu_kernels.{path.parent.name}.{stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            _modules[path] = module
        return module


def library() -> ModuleType:
    """The hand-written kernels of ``library.py``, imported from the cache directory."""
    return _load("library", Path(__file__).with_name("library.py").read_text())


def generated_kernel(source: str) -> Callable:
    """The ``kernel`` function of a generated module (one module per distinct source)."""
    stem = "k_" + hashlib.sha256(source.encode()).hexdigest()[:20]
    return _load(stem, source).kernel


def specialize(dispatcher, *args) -> Callable:
    """Compile (or load from the disk cache) ``dispatcher`` for the types of ``args`` and
    return its compiled entry point, which skips numba's per-call type dispatch.

    The entry point trusts its arguments' types: callers pass it exactly these arrays
    (or arrays of identical type). A cache entry that fails to load is deleted and the
    kernel compiled again.
    """
    signature = tuple(numba.typeof(a) for a in args)
    with _lock:
        try:
            dispatcher.compile(signature)
        except numba.core.errors.TypingError:
            raise  # the kernel itself is wrong: no cache entry to blame
        except Exception as e:  # noqa: BLE001 -- a corrupt cache entry surfaces as anything
            if not _purge_cache(dispatcher):
                raise
            log.warning("rlx-cpu: dropped a numba cache entry of %s that failed to load (%s: %s)",
                        dispatcher.py_func.__module__, type(e).__name__, e)
            dispatcher.compile(signature)
    entry = dispatcher.overloads[signature].entry_point
    _entry_points.add(id(entry))
    return entry


def is_compiled(fn) -> bool:
    """Whether ``fn`` is an entry point from ``specialize`` (numba code: no numpy warnings)."""
    return id(fn) in _entry_points


def _purge_cache(dispatcher) -> bool:
    """Delete numba's cache files for the module defining ``dispatcher``; True if any."""
    source = Path(dispatcher.py_func.__code__.co_filename)
    removed = False
    for f in (source.parent / "__pycache__").glob(f"{source.stem}.*.nb[ic]"):
        f.unlink(missing_ok=True)
        removed = True
    return removed and source.parent == kernel_dir()


@functools.lru_cache(maxsize=None)
def warm_up() -> None:
    """Start numba (about 0.5 s, once per process: numba loads its type registries on
    its first compile). Compiling a graph does it when needed; a server may call this at
    start-up instead."""
    numba.njit(lambda x: x + 1)(1)

"""Numba kernels: loading them through the disk cache and specializing them for arrays.

Kernel modules -- the hand-written ``library.py`` and the generated fused kernels of
``codegen`` -- are written into ``rlx_cpu.cache.kernel_dir()`` and imported from
there, so that numba's ``cache=True`` keeps their machine code under
``$XDG_CACHE_HOME/rlx`` and a second process loads instead of compiling.

What is executed is the source text in hand, compiled here: Python's ``.pyc`` files are
neither read nor written, so a planted or corrupt one in the cache has no effect. Before
numba reads its index (a pickle) and code files of a module, each must be a trusted file
(``rlx_core.runtime.safefs``: not a link, owned by this user, writable by nobody else)
in a trusted folder; an untrusted file is deleted and the kernel compiled again, an
untrusted folder (say a world-writable ``NUMBA_CACHE_DIR``) is not used at all. Files
numba writes are made 0600 whatever the umask.

Importing this package imports numba (about 0.3 s); ``plugin.py`` never does.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import stat
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Callable

import numba
from numba.core.caching import NullCache
from rlx_core.runtime.safefs import file_problem, private_dir

from ..cache import ensure_source

__all__ = ["library", "generated_kernel", "specialize", "is_compiled", "warm_up"]

log = logging.getLogger("rlx.cpu")
_lock = threading.RLock()
_modules: dict[Path, ModuleType] = {}
_entry_points: set[int] = set()  # ids of compiled entry points (they live as long as the process)
_listings: dict[str, dict[str, list[str]]] = {}  # numba cache folder -> module stem -> file names


def _load(stem: str, source: str) -> ModuleType:
    """The module of ``source``, kept as ``kernel_dir()/<stem>.py`` (once per process)."""
    with _lock:
        path = ensure_source(f"{stem}.py", source)
        module = _modules.get(path)
        if module is None:
            name = f"_rlx_cpu_kernels.{path.parent.name}.{stem}"
            module = ModuleType(name)
            module.__file__ = str(path)  # numba keys its cache on the file next to its __pycache__
            sys.modules[name] = module
            exec(compile(source, str(path), "exec"), module.__dict__)
            _check_numba_cache(module)
            _modules[path] = module
        return module


def _own_dispatchers(module: ModuleType) -> list:
    return [v for v in vars(module).values()
            if isinstance(v, numba.core.dispatcher.Dispatcher) and v.py_func.__module__ == module.__name__]


def _check_numba_cache(module: ModuleType) -> None:
    """Before numba reads anything of ``module`` from disk: drop untrusted files, and
    switch caching off for a folder that is not trusted (compiled in memory)."""
    refused: dict[str, str] = {}
    for dispatcher in _own_dispatchers(module):
        folder = dispatcher._cache.cache_path
        if folder is None:  # not cached (NullCache)
            continue
        if folder not in refused:
            try:
                private_dir(folder)
                refused[folder] = ""
            except OSError as e:
                refused[folder] = str(e)
                log.warning("rlx-cpu: not using numba's cache folder (%s); compiling %s in memory", e, module.__name__)
        if refused[folder]:
            dispatcher._cache = NullCache()
    stem = Path(module.__file__).stem
    for folder in (f for f, why in refused.items() if not why):
        for f in _listed(folder, stem):
            try:
                problem = file_problem(f)
            except FileNotFoundError:
                continue
            if problem:
                log.warning("rlx-cpu: deleted numba cache file %s, which %s; compiling again", f, problem)
                f.unlink(missing_ok=True)


def _listed(folder: str, stem: str) -> list[Path]:
    """numba's files in ``folder`` for the module ``stem``, from a listing made once per
    process (the folder holds every kernel ever cached: listing it per module would cost
    milliseconds each; files added later come from this user's processes)."""
    listing = _listings.get(folder)
    if listing is None:
        listing = _listings[folder] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                if entry.name.endswith((".nbi", ".nbc")):
                    listing.setdefault(entry.name.split(".", 1)[0], []).append(entry.name)
    return [Path(folder, name) for name in listing.get(stem, ())]


def _cache_files(dispatcher) -> list[Path]:
    """numba's index and code files for the module defining ``dispatcher``."""
    folder = dispatcher._cache.cache_path
    if folder is None:
        return []
    stem = Path(dispatcher.py_func.__code__.co_filename).stem
    return list(Path(folder).glob(f"{stem}.*.nb[ic]"))


def _restrict(dispatcher) -> None:
    """Make the cache files numba just wrote 0600 (it creates them with the umask)."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    for f in _cache_files(dispatcher):
        try:
            st = os.lstat(f)
            if stat.S_ISREG(st.st_mode) and st.st_uid == uid and st.st_mode & 0o077:
                os.chmod(f, 0o600)
        except OSError:
            pass  # replaced or removed by another process meanwhile


def library() -> ModuleType:
    """The hand-written kernels of ``library.py``, imported from the cache directory."""
    return _load("library", Path(__file__).with_name("library.py").read_text())


def generated_kernel(source: str, name: str = "kernel") -> Callable:
    """The ``kernel`` function (or another, ``name``) of a generated module (one module
    per distinct source)."""
    stem = "k_" + hashlib.sha256(source.encode()).hexdigest()[:20]
    return getattr(_load(stem, source), name)


def specialize(dispatcher, *args) -> Callable:
    """Compile (or load from the disk cache) ``dispatcher`` for the types of ``args`` and
    return its compiled entry point, which skips numba's per-call type dispatch.

    The entry point trusts its arguments' types: callers pass it exactly these arrays
    (or arrays of identical type). A cache entry that fails to load is deleted and the
    kernel compiled again.
    """
    signature = tuple(numba.typeof(a) for a in args)
    with _lock:
        misses = sum(dispatcher.stats.cache_misses.values())
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
        if sum(dispatcher.stats.cache_misses.values()) > misses:
            _restrict(dispatcher)
    entry = dispatcher.overloads[signature].entry_point
    _entry_points.add(id(entry))
    return entry


def is_compiled(fn) -> bool:
    """Whether ``fn`` is an entry point from ``specialize`` (numba code: no numpy warnings)."""
    return id(fn) in _entry_points


def _purge_cache(dispatcher) -> bool:
    """Delete numba's cache files for the kernel module defining ``dispatcher``; True if any."""
    if not dispatcher.py_func.__module__.startswith("_rlx_cpu_kernels."):
        return False
    files = _cache_files(dispatcher)
    for f in files:
        f.unlink(missing_ok=True)
    return bool(files)


@functools.lru_cache(maxsize=None)
def warm_up() -> None:
    """Start numba (about 0.5 s, once per process: numba loads its type registries on
    its first compile). Compiling a graph does it when needed; a server may call this at
    start-up instead."""
    numba.njit(lambda x: x + 1)(1)

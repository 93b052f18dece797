"""The CPU backend's disk cache: kernel sources, numba's compiled code, measured choices.

Everything lives in one directory per build of the kernel sources::

    $XDG_CACHE_HOME/rlx/cpu/<tag>/      (default ~/.cache/rlx/cpu/<tag>/)
        library.py, ew_<hash>.py ...    kernel modules, imported from here
        __pycache__/                    numba's index and object files (cache=True)
        decisions-<machine>.json        choices measured on this machine (``rlx_cpu.planner``)

``tag`` hashes the numba version and the sources every kernel depends on, so a new
numba or an edited kernel starts a fresh directory and stale machine code is never
loaded; ``<machine>`` (``machine_fingerprint``) names the CPU, the cores and numpy's BLAS,
so a cache folder shared between machines keeps each one's measurements apart. Files
are written atomically (temp file + rename). A corrupt file is never
fatal: a source that does not match what we would write is rewritten, unreadable
decisions are measured again, and a numba cache entry that fails to load is deleted
and the kernel compiled again (see ``rlx_cpu.jit``).

Trust (``rlx_core.runtime.safefs``): the folders are created 0700 and files 0600. A
folder that others could write (or a link, or one owned by someone else), or one that
cannot be written, is not used: a private temporary folder, removed at exit, takes its
place (one warning), so kernels are compiled for this process only. Kernel modules are
compiled from the source text in hand, never from a ``.pyc``; numba's index and code
files are checked before numba reads them (``rlx_cpu.jit``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import tempfile
import threading
from pathlib import Path

from rlx_core.runtime.safefs import (UntrustedPathError, cache_root, private_dir, private_temp_dir, read_trusted,
                                     write_atomic)

__all__ = ["cache_root", "kernel_dir", "ensure_source", "Decisions", "machine_fingerprint", "threadpools"]

log = logging.getLogger("rlx.cpu")

_JIT_SOURCES = ("fastmath.py", "scalar.py", "library.py")  # what compiled kernels depend on
_dir_lock = threading.Lock()
_dirs: dict[Path, Path] = {}


def _tag() -> str:
    import numba
    h = hashlib.sha256(numba.__version__.encode())
    jit_dir = Path(__file__).with_name("jit")
    for name in _JIT_SOURCES:
        h.update((jit_dir / name).read_bytes())
    return h.hexdigest()[:16]


def kernel_dir() -> Path:
    """The directory kernel modules are written to and imported from (created on demand)."""
    wanted = cache_root() / "cpu" / _tag()
    with _dir_lock:
        if wanted not in _dirs:
            _dirs[wanted] = _usable_dir(wanted)
        return _dirs[wanted]


def _usable_dir(wanted: Path) -> Path:
    """``wanted`` (and numba's ``__pycache__`` in it) if trusted and writable, else a
    private temporary folder for this process."""
    try:
        private_dir(wanted)
        private_dir(wanted / "__pycache__")
        tempfile.TemporaryFile(dir=wanted).close()  # writable (a read-only mount passes every other check)
        return wanted
    except UntrustedPathError as e:
        why = f"not using the kernel cache: {e}"
    except OSError as e:
        why = f"cannot write the kernel cache {wanted} ({e})"
    fallback = private_temp_dir("rlx-cpu-")
    private_dir(fallback / "__pycache__")
    log.warning("rlx-cpu: %s; compiling into %s for this process only (removed at exit)", why, fallback)
    return fallback


def ensure_source(name: str, text: str) -> Path:
    """``kernel_dir()/name`` holding exactly ``text`` (written if missing or different)."""
    path = kernel_dir() / name
    try:
        current = path.read_text()
    except (OSError, UnicodeDecodeError):
        current = None
    if current != text:
        write_atomic(path, text)
    return path


@functools.lru_cache(maxsize=1)
def machine_fingerprint() -> str:
    """A short hash of what measured choices depend on besides the kernel sources: the
    CPU model, the cores this process may use, numpy and its BLAS (library, version,
    the kernels it picked for this CPU, its threading)."""
    import numpy as np
    parts = [platform.machine(), _cpu_model(), os.cpu_count(),
             len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None, np.__version__]
    controller = threadpools()
    blas = [i for i in controller.info() if i.get("user_api") == "blas"] if controller is not None else []
    # numpy's own (numpy.libs/, numpy/.dylibs/): not whichever others happen to be loaded yet
    own = [i for i in blas if "numpy" in Path(i.get("filepath", "")).parent.name] or blas
    parts += sorted((i.get("internal_api"), i.get("version"), i.get("architecture"), i.get("threading_layer"))
                    for i in own)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def threadpools():
    """threadpoolctl's controller of the thread pools loaded now (numpy's BLAS
    included), or None without threadpoolctl. Made once: it scans every loaded library
    (10-20 ms), and the fingerprint and ``threads.blas_threads`` both read it."""
    import numpy  # noqa: F401  (its BLAS must be loaded to be seen)
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


_PROVISIONAL = "~"  # a stored value measured while the machine was not known to be quiet


class Decisions:
    """A JSON map of measured choices (``key -> value``) for this machine, shared by
    every process. A value may be stored *provisional* (measured on a machine not known
    to be quiet): it is used like any other, and ``rlx_cpu.planner`` measures it again.

    Reads are served from memory after the first load; ``set`` merges with what other
    processes wrote meanwhile, then replaces the file atomically.
    """

    def __init__(self, filename: str = "decisions"):
        self.filename = filename
        self._lock = threading.Lock()
        self._values: dict[str, str] | None = None

    def _path(self) -> Path:
        return kernel_dir() / f"{self.filename}-{machine_fingerprint()}.json"

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(read_trusted(self._path()))
        except (OSError, ValueError):  # missing, untrusted (UntrustedPathError is an OSError), corrupt
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}

    def _raw(self, key: str) -> str | None:
        with self._lock:
            if self._values is None:
                self._values = self._read()
            return self._values.get(key)

    def get(self, key: str) -> str | None:
        value = self._raw(key)
        return value.removeprefix(_PROVISIONAL) if value is not None else None

    def provisional(self, key: str) -> bool:
        """Whether the value stored for ``key`` is to be measured again (see the class)."""
        value = self._raw(key)
        return value is not None and value.startswith(_PROVISIONAL)

    def set(self, key: str, value: str, provisional: bool = False) -> None:
        with self._lock:
            stored = _PROVISIONAL + value if provisional else value
            self._values = {**self._read(), **(self._values or {}), key: stored}
            try:
                write_atomic(self._path(), json.dumps(self._values, indent=0, sort_keys=True))
            except OSError as e:
                log.warning("rlx-cpu: cannot save measured choices to %s: %s", self._path(), e)

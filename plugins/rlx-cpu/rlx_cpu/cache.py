"""The CPU backend's disk cache: kernel sources, numba's compiled code, fusion decisions.

Everything lives in one directory per build of the kernel sources::

    $XDG_CACHE_HOME/rlx/cpu/<tag>/      (default ~/.cache/rlx/cpu/<tag>/)
        library.py, ew_<hash>.py ...    kernel modules, imported from here
        __pycache__/                    numba's index and object files (cache=True)
        decisions.json                  fused-or-not decisions measured at compile time

``tag`` hashes the numba version and the sources every kernel depends on, so a new
numba or an edited kernel starts a fresh directory and stale machine code is never
loaded. Files are written atomically (temp file + rename). A corrupt file is never
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

import hashlib
import json
import logging
import tempfile
import threading
from pathlib import Path

from rlx_core.runtime.safefs import (UntrustedPathError, cache_root, private_dir, private_temp_dir, read_trusted,
                                     write_atomic)

__all__ = ["cache_root", "kernel_dir", "ensure_source", "Decisions"]

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


class Decisions:
    """A JSON map of measured choices (``key -> value``), shared by every process.

    Reads are served from memory after the first load; ``set`` merges with what other
    processes wrote meanwhile, then replaces the file atomically.
    """

    def __init__(self, filename: str = "decisions.json"):
        self.filename = filename
        self._lock = threading.Lock()
        self._values: dict[str, str] | None = None

    def _path(self) -> Path:
        return kernel_dir() / self.filename

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(read_trusted(self._path()))
        except (OSError, ValueError):  # missing, untrusted (UntrustedPathError is an OSError), corrupt
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> str | None:
        with self._lock:
            if self._values is None:
                self._values = self._read()
            return self._values.get(key)

    def set(self, key: str, value: str) -> None:
        with self._lock:
            self._values = {**self._read(), **(self._values or {}), key: value}
            try:
                write_atomic(self._path(), json.dumps(self._values, indent=0, sort_keys=True))
            except OSError as e:
                log.warning("rlx-cpu: cannot save fusion decisions to %s: %s", self._path(), e)

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
and the kernel compiled again (see ``rlx_cpu.jit``). If the cache directory cannot be
written, a private temporary directory takes its place (with a warning).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["cache_root", "kernel_dir", "write_atomic", "ensure_source", "Decisions"]

log = logging.getLogger("rlx.cpu")

_JIT_SOURCES = ("fastmath.py", "scalar.py", "library.py")  # what compiled kernels depend on
_dir_lock = threading.Lock()
_dirs: dict[Path, Path] = {}


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/rlx`` (``~/.cache/rlx`` when the variable is unset or empty)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlx"


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
    try:
        wanted.mkdir(parents=True, exist_ok=True)
        probe = wanted / f".probe{os.getpid()}"
        probe.write_text("")
        probe.unlink()
        return wanted
    except OSError as e:
        fallback = Path(tempfile.mkdtemp(prefix="rlx-cpu-"))
        log.warning("rlx-cpu: cannot write the kernel cache %s (%s); using %s for this process",
                    wanted, e, fallback)
        return fallback


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
            data = json.loads(self._path().read_text())
        except (OSError, ValueError):
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

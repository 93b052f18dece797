"""Files RLX keeps between runs, and when to trust them.

Why: some caches hold code. rlx-cpu runs kernel modules kept in its cache and numba
unpickles its index there; CuPy loads cubins and rlx-rocm OpenCL binaries from theirs.
Whoever can write such a folder runs code in every process that compiles a graph. So,
as ssh (``StrictModes``) and pip do for their files:

* A folder is trusted when it is a real folder (not a link) owned by this user and
  writable by nobody else, and every folder above it is owned by this user or root and
  writable by nobody else unless sticky (like ``/tmp``): then no other user can put,
  swap or rename anything in it. :func:`private_dir` creates missing folders 0700 and
  raises :class:`UntrustedPathError` for one that fails; callers then go without the
  cache (compile in memory or into a :func:`private_temp_dir`) after one warning.
* A file is trusted when it is a regular file (not a link) owned by this user and
  writable by nobody else: :func:`file_problem`, :func:`open_trusted`, :func:`read_trusted`.
* Files are created 0600 and never through a link: :func:`create_exclusive`
  (``O_CREAT|O_EXCL|O_NOFOLLOW``) and :func:`write_atomic` (``mkstemp`` in the target's
  folder, then ``os.replace``: readers see the old or the new file, never half, and no
  predictable temporary name exists for someone to plant a link at).

The trust boundary is the user id. Entries carry no HMAC: its key would sit in a file
this user can read, so whatever runs as this user could sign its own entries -- and could
as well edit the installed packages. A cache copied in from elsewhere (a restored
archive) is trusted like any file of the user's own; delete ``$XDG_CACHE_HOME/rlx`` to
drop it. On systems without user ids (Windows) only the link and file-type checks apply.
"""
from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ..errors import CacheError

__all__ = ["UntrustedPathError", "cache_root", "private_dir", "file_problem", "open_trusted", "read_trusted",
           "create_exclusive", "write_atomic", "private_temp_dir"]

_UID = os.getuid() if hasattr(os, "getuid") else None
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class UntrustedPathError(CacheError, PermissionError):
    """A cache folder or file that others could have written (or that is a link): not used."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/rlx`` (``~/.cache/rlx`` when the variable is unset or blank)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return Path(base or Path.home() / ".cache") / "rlx"


def _problem(st: os.stat_result, directory: bool) -> str | None:
    """Why an entry with status ``st`` (from lstat/fstat) is not to be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if directory and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if _UID is not None:
        if st.st_uid != _UID:
            return f"is owned by uid {st.st_uid}, not by this user (uid {_UID})"
        if st.st_mode & 0o022:
            return f"has mode {stat.S_IMODE(st.st_mode):o}: group or others may write to it"
    return None


def _ancestor_problem(path: Path) -> str | None:
    """Why a folder above ``path`` lets another user swap what is in it, or None."""
    if _UID is None:
        return None
    parent = Path(os.path.realpath(path.parent))
    for folder in (parent, *parent.parents):
        st = os.stat(folder)
        if st.st_uid not in (_UID, 0):
            return f"sits in {folder}, owned by uid {st.st_uid} (neither this user nor root)"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"sits in {folder}, mode {stat.S_IMODE(st.st_mode):o}: group or others may rename what is in it"
    return None


def private_dir(path: str | os.PathLike) -> Path:
    """``path`` as a trusted folder: missing folders are created 0700; raises
    :class:`UntrustedPathError` (a ``PermissionError``) saying why an existing one is not
    trusted, or ``OSError`` when it cannot be created."""
    path = Path(path)
    missing = []
    at = path
    while not os.path.lexists(at) and at != at.parent:
        missing.append(at)
        at = at.parent
    if missing:  # nothing is created under a folder that is not trusted
        problem = _ancestor_problem(missing[-1])
        if problem:
            raise UntrustedPathError(f"{path} {problem}")
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below like any other
            os.mkdir(folder, 0o700)
    problem = _problem(os.lstat(path), directory=True) or _ancestor_problem(path)
    if problem:
        raise UntrustedPathError(f"{path} {problem}")
    return path


def file_problem(path: str | os.PathLike | int) -> str | None:
    """Why the file at ``path`` (not looking through a link), or open as descriptor
    ``path``, is not to be trusted, or None; ``FileNotFoundError`` when there is none."""
    return _problem(os.fstat(path) if isinstance(path, int) else os.lstat(path), directory=False)


def open_trusted(path: str | os.PathLike, writable: bool = False) -> int:
    """A descriptor of the trusted file at ``path``, opened without following a link;
    ``writable``: read-write, created 0600 when missing. ``FileNotFoundError`` when
    missing (read-only), :class:`UntrustedPathError` when not trusted."""
    flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
    try:
        fd = os.open(path, flags | _FLAGS, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UntrustedPathError(f"{path} is a symbolic link") from None
        raise
    problem = file_problem(fd)
    if problem:
        os.close(fd)
        raise UntrustedPathError(f"{path} {problem}")
    return fd


def read_trusted(path: str | os.PathLike) -> bytes:
    """The bytes of the trusted file at ``path`` (see :func:`open_trusted`)."""
    with os.fdopen(open_trusted(path), "rb") as f:
        return f.read()


def create_exclusive(path: str | os.PathLike, mode: int = 0o600) -> int:
    """A new file at ``path`` opened read-write (``mode`` 0600): ``FileExistsError`` when
    anything, a link included, is already there. Returns the descriptor."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _FLAGS, mode)


def write_atomic(path: str | os.PathLike, data: bytes | str, fsync: bool = False) -> None:
    """Replace ``path`` with ``data``: written to a fresh 0600 ``mkstemp`` file in the same
    folder, then renamed over it (``fsync`` first when the content must survive a crash)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def private_temp_dir(prefix: str) -> Path:
    """A fresh 0700 folder in the temp directory, removed when the process exits."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder)

"""The disk cache of compiled OpenCL programs.

``$XDG_CACHE_HOME/rlx/rocm/`` (default ``~/.cache/rlx/rocm/``) holds one file per program:
``<key>.bin``, where ``key`` hashes the program source, the build options and the device
(platform, device name, driver and OpenCL versions). A file holds a magic line, the
SHA-256 of its payload and the payload: the binary ``clGetProgramInfo(CL_PROGRAM_BINARIES)``
returned for that device (device code on a GPU driver, LLVM bitcode on PoCL).

Loading a binary runs it, so the directory is trusted only when it is ours: created with
mode 0700, it must be a real directory (not a symlink) owned by this user and not
accessible to the group or others; each file must be a regular file owned by this user
and writable by nobody else. Otherwise the cache is not read (a warning says why) and
programs are compiled from source. Files are written atomically (temporary file +
rename); a corrupt file, or a binary the driver refuses, is deleted and rebuilt.
"""
from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import threading
from pathlib import Path

__all__ = ["cache_dir", "program_key", "load_binary", "store_binary", "MAGIC"]

log = logging.getLogger("rlx.rocm")
MAGIC = b"RLX-ROCM-PROGRAM 1\n"
_lock = threading.Lock()
_checked: dict[Path, "Path | None"] = {}


def _root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlx" / "rocm"


def _owned_private(st: os.stat_result, directory: bool) -> str | None:
    """Why a file or directory with status ``st`` is not to be trusted, or None."""
    if directory and not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user ({os.getuid()})"
    mask = 0o077 if directory else 0o022
    if st.st_mode & mask:
        return f"has mode {stat.S_IMODE(st.st_mode):o} (group/others may {'enter' if directory else 'write'})"
    return None


def cache_dir() -> Path | None:
    """The cache directory, created 0700 on first use; None when it cannot be trusted or
    written (programs are then compiled from source every time)."""
    path = _root()
    with _lock:
        if path in _checked:
            return _checked[path]
        result = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                pass
            why = _owned_private(os.lstat(path), directory=True)
            if why:
                log.warning("rlx-rocm: not using the program cache %s: it %s", path, why)
            else:
                result = path
        except OSError as e:
            log.warning("rlx-rocm: cannot create the program cache %s (%s); compiling from source", path, e)
        _checked[path] = result
        return result


def forget_checks() -> None:
    """Look at the cache directory again on next use (tests change XDG_CACHE_HOME)."""
    with _lock:
        _checked.clear()


def program_key(source: str, options: str, device_id: str) -> str:
    h = hashlib.sha256()
    for part in (device_id, options, source):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def load_binary(key: str) -> bytes | None:
    """The cached binary for ``key``, or None (missing, untrusted or corrupt: deleted)."""
    directory = cache_dir()
    if directory is None:
        return None
    path = directory / f"{key}.bin"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("rlx-rocm: cannot open cached program %s (%s)", path, e)
        return None
    with os.fdopen(fd, "rb") as f:
        why = _owned_private(os.fstat(f.fileno()), directory=False)
        if why:
            log.warning("rlx-rocm: ignoring cached program %s: it %s", path, why)
            return None
        data = f.read()
    header_end = len(MAGIC) + 65
    if not data.startswith(MAGIC) or len(data) < header_end or \
            hashlib.sha256(data[header_end:]).hexdigest().encode() != data[len(MAGIC):header_end - 1]:
        log.info("rlx-rocm: cached program %s is corrupt; rebuilding it", path)
        discard(key)
        return None
    return data[header_end:]


def store_binary(key: str, binary: bytes) -> None:
    directory = cache_dir()
    if directory is None or not binary:
        return
    payload = MAGIC + hashlib.sha256(binary).hexdigest().encode() + b"\n" + binary
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(tmp, directory / f"{key}.bin")
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("rlx-rocm: cannot write to the program cache %s (%s)", directory, e)


def discard(key: str) -> None:
    directory = cache_dir()
    if directory is not None:
        try:
            (directory / f"{key}.bin").unlink()
        except OSError:
            pass

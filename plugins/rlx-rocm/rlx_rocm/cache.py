"""The disk cache of compiled OpenCL programs.

``$XDG_CACHE_HOME/rlx/rocm/`` (default ``~/.cache/rlx/rocm/``) holds one file per program:
``<key>.bin``, where ``key`` hashes the program source, the build options and the device
(platform, device name, driver and OpenCL versions). A file holds a magic line, the
SHA-256 of its payload and the payload: the binary ``clGetProgramInfo(CL_PROGRAM_BINARIES)``
returned for that device (device code on a GPU driver, LLVM bitcode on PoCL).

Loading a binary runs it, so the directory and each file are used only when trusted
(``rlx_core.runtime.safefs``): the directory is created 0700 and must be a real directory
owned by this user that nobody else may write, in folders nobody else may swap; a file
must be a regular file (not a link) owned by this user and writable by nobody else.
Otherwise the cache is not read (a warning says why) and programs are compiled from
source. Files are written atomically (0600 temporary file + rename); a corrupt file, or
a binary the driver refuses, is deleted and rebuilt.
"""
from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from rlx_core.runtime.safefs import UntrustedPathError, cache_root, private_dir, read_trusted, write_atomic

__all__ = ["cache_dir", "program_key", "load_binary", "store_binary", "MAGIC"]

log = logging.getLogger("rlx.rocm")
MAGIC = b"RLX-ROCM-PROGRAM 1\n"
_lock = threading.Lock()
_checked: dict[Path, "Path | None"] = {}


def cache_dir() -> Path | None:
    """The cache directory, created 0700 on first use; None when it cannot be trusted or
    written (programs are then compiled from source every time)."""
    path = cache_root() / "rocm"
    with _lock:
        if path not in _checked:
            try:
                _checked[path] = private_dir(path)
            except UntrustedPathError as e:
                log.warning("rlx-rocm: not using the program cache: %s", e)
                _checked[path] = None
            except OSError as e:
                log.warning("rlx-rocm: cannot create the program cache %s (%s); compiling from source", path, e)
                _checked[path] = None
        return _checked[path]


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
        data = read_trusted(path)
    except FileNotFoundError:
        return None
    except UntrustedPathError as e:
        log.warning("rlx-rocm: ignoring cached program: %s", e)
        return None
    except OSError as e:
        log.warning("rlx-rocm: cannot open cached program %s (%s)", path, e)
        return None
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
        write_atomic(directory / f"{key}.bin", payload)
    except OSError as e:
        log.warning("rlx-rocm: cannot write to the program cache %s (%s)", directory, e)


def discard(key: str) -> None:
    directory = cache_dir()
    if directory is not None:
        try:
            (directory / f"{key}.bin").unlink()
        except OSError:
            pass

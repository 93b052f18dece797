"""The kernel cache under $XDG_CACHE_HOME/rlx: reused by a second process, rebuilt when
corrupt, replaced by a temporary directory when it cannot be written or trusted; nothing
planted in it (a .pyc, a pickled numba index) ever runs.

Each scenario runs a fresh interpreter (numba keeps compiled kernels in memory, so only
a new process shows what the disk cache does).
"""
import importlib.util
import json
import marshal
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rlx_cpu.cache import machine_fingerprint

ROOT = Path(__file__).resolve().parents[3]

# Compiles a graph with a fused kernel and a library kernel, checks the result and
# reports how numba got each kernel (compiled now, or loaded from the disk cache).
PROBE = r"""
import json, sys, numpy as np
from rlx_core import Graph, Session, evaluate
g = Graph("probe")
x = g.input("x", (3, 8))
g.set_outputs([g.softmax(g.tanh(x) * 2.0 + 1.0)])
compiled = Session("cpu").compile(g)
feed = {"x": np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)}
np.testing.assert_allclose(compiled.run(feed)[0], evaluate(g, feed)[0], rtol=1e-5, atol=1e-6)
import rlx_cpu.jit as jit
stats = [m.kernel.stats if hasattr(m, "kernel") else m.softmax.stats for m in jit._modules.values()]
print(json.dumps({"hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats)}))
"""


def _probe(cache_home: Path, umask: int = -1, **env_vars) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), **env_vars,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "rlx-cpu")])}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300,
                          umask=umask)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _kernel_dir(cache_home: Path) -> Path:
    (tag,) = (cache_home / "rlx" / "cpu").iterdir()
    return tag


def test_second_process_loads_every_kernel_from_disk(tmp_path):
    first, _ = _probe(tmp_path)
    assert first["misses"] >= 2 and first["hits"] == 0  # compiled: the fused kernel and softmax
    second, _ = _probe(tmp_path)
    assert second["misses"] == 0 and second["hits"] == first["misses"]
    kernels = _kernel_dir(tmp_path)
    assert (kernels / "library.py").exists() and list(kernels.glob("k_*.py"))
    assert list((kernels / "__pycache__").glob("*.nbi")) and list((kernels / "__pycache__").glob("*.nbc"))


def test_corrupt_entries_are_rebuilt(tmp_path):
    _probe(tmp_path)
    kernels = _kernel_dir(tmp_path)
    for f in (kernels / "__pycache__").glob("*.nb[ic]"):
        f.write_bytes(b"\x80\x04garbage")
    for f in kernels.glob("k_*.py"):
        f.write_text("this is not python")
    (kernels / f"decisions-{machine_fingerprint()}.json").write_text("{not json")
    result, log = _probe(tmp_path)  # still correct (the probe checks the numbers)
    assert result["misses"] >= 1
    assert "dropped a numba cache entry" in log
    third, _ = _probe(tmp_path)
    assert third["misses"] == 0


@pytest.mark.skipif(sys.platform == "win32", reason="a file in place of the cache directory")
def test_unwritable_cache_falls_back_to_a_temporary_directory(tmp_path):
    (tmp_path / "rlx").write_text("a file where the cache directory should be")
    result, log = _probe(tmp_path)
    assert result["misses"] >= 2
    assert "cannot write the kernel cache" in log


class _Payload:
    """Unpickling it (what numba does to its index) writes ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _plant_pyc(source: Path, body: bytes) -> None:
    """A .pyc whose header matches ``source`` (what Python's import would accept as current)."""
    st = source.stat()
    header = importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + \
        (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(header + body)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_planted_or_corrupt_pyc_is_never_loaded(tmp_path):
    """A .pyc with a valid header next to a kernel module: code in it never runs, and a
    corrupt body (once 'bad marshal data' on every later compile) costs nothing."""
    _probe(tmp_path / "cache")
    kernels = _kernel_dir(tmp_path / "cache")
    marker = tmp_path / "pyc-ran"
    _plant_pyc(kernels / "library.py", marshal.dumps(compile(f"open({str(marker)!r}, 'w').write('ran')", "x", "exec")))
    for source in kernels.glob("k_*.py"):
        _plant_pyc(source, b"\xe3 not marshal data")
    result, _ = _probe(tmp_path / "cache")  # the probe checks the numbers
    assert not marker.exists()
    assert result["misses"] == 0  # numba's own cache still serves every kernel


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_world_writable_cache_is_refused(tmp_path):
    """Planted pickles in a cache folder others may write are never read: the folder is
    refused with one warning and kernels are compiled for this process only."""
    _probe(tmp_path / "cache")
    kernels = _kernel_dir(tmp_path / "cache")
    marker = tmp_path / "nbi-ran"
    for index in (kernels / "__pycache__").glob("*.nbi"):
        index.write_bytes(pickle.dumps(_Payload(marker)))
    os.chmod(kernels, 0o777)
    result, log = _probe(tmp_path / "cache")
    assert not marker.exists()
    assert log.count("not using the kernel cache") == 1 and "group or others may write" in log
    assert result["misses"] >= 2 and result["hits"] == 0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_untrusted_numba_files_are_deleted_unread(tmp_path):
    """In a trusted folder, a numba index that is a link, writable by others or (as root)
    owned by someone else is deleted before numba reads it, and rebuilt."""
    _probe(tmp_path / "cache")
    cache = _kernel_dir(tmp_path / "cache") / "__pycache__"
    marker = tmp_path / "nbi-ran"
    evil = tmp_path / "evil.nbi"
    evil.write_bytes(pickle.dumps(_Payload(marker)))
    indexes = sorted(cache.glob("*.nbi"))
    assert len(indexes) >= 2
    indexes[0].unlink()
    indexes[0].symlink_to(evil)
    indexes[1].write_bytes(evil.read_bytes())
    os.chmod(indexes[1], 0o666)
    if os.geteuid() == 0 and len(indexes) > 2:
        indexes[2].write_bytes(evil.read_bytes())
        os.chown(indexes[2], 65534, 65534)
    result, log = _probe(tmp_path / "cache")
    assert not marker.exists()
    assert "is a symbolic link" in log and "group or others may write" in log
    assert result["misses"] >= 2
    assert all(stat.S_ISREG(os.lstat(f).st_mode) for f in cache.glob("*.nbi"))  # rebuilt as files


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_untrusted_numba_cache_dir_is_not_used(tmp_path):
    numba_dir = tmp_path / "numba"
    numba_dir.mkdir()
    os.chmod(numba_dir, 0o777)
    result, log = _probe(tmp_path / "cache", NUMBA_CACHE_DIR=str(numba_dir))
    assert "not using numba's cache folder" in log and result["misses"] >= 2
    assert not any(numba_dir.rglob("*.nb[ic]"))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_cache_is_private_whatever_the_umask(tmp_path):
    """Under umask 000 (once 0777 folders): folders 0700, files 0600."""
    _probe(tmp_path / "cache", umask=0)
    root = tmp_path / "cache" / "rlx"
    entries = [root, *root.rglob("*")]
    assert len(entries) > 5
    for entry in entries:
        mode = stat.S_IMODE(os.lstat(entry).st_mode)
        assert mode == 0o700 if entry.is_dir() else mode & 0o077 == 0, (entry, oct(mode))

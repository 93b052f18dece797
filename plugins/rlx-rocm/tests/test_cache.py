"""The program cache: private directory, owner/mode checks, corrupt files, reuse."""
import os
import stat

import numpy as np
import pytest

from rlx_rocm import cache


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.forget_checks()
    yield tmp_path
    cache.forget_checks()


@pytest.mark.no_platform
def test_directory_is_created_private_and_binaries_round_trip(cache_home):
    d = cache.cache_dir()
    assert d == cache_home / "rlx" / "rocm"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    cache.store_binary("k1", b"\x00binary\xff")
    assert cache.load_binary("k1") == b"\x00binary\xff"
    assert stat.S_IMODE(os.stat(d / "k1.bin").st_mode) & 0o022 == 0


@pytest.mark.no_platform
def test_corrupt_files_are_discarded(cache_home):
    cache.store_binary("k2", b"payload")
    path = cache.cache_dir() / "k2.bin"
    data = path.read_bytes()
    path.write_bytes(data[:-1] + b"X")
    assert cache.load_binary("k2") is None and not path.exists()


@pytest.mark.no_platform
def test_files_others_may_write_are_not_loaded(cache_home):
    cache.store_binary("k3", b"payload")
    path = cache.cache_dir() / "k3.bin"
    os.chmod(path, 0o666)
    assert cache.load_binary("k3") is None


@pytest.mark.no_platform
def test_a_linked_binary_is_not_loaded(cache_home, tmp_path):
    cache.store_binary("k5", b"payload")
    path = cache.cache_dir() / "k5.bin"
    (tmp_path / "planted.bin").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(tmp_path / "planted.bin")
    assert cache.load_binary("k5") is None


@pytest.mark.no_platform
def test_a_directory_others_may_write_is_not_used(cache_home):
    d = cache_home / "rlx" / "rocm"
    d.mkdir(parents=True)
    os.chmod(d, 0o775)
    assert cache.cache_dir() is None
    assert cache.load_binary("k4") is None
    cache.store_binary("k4", b"x")  # silently not written
    assert not (d / "k4.bin").exists()


@pytest.mark.no_platform
def test_a_symlinked_directory_is_not_used(cache_home, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (cache_home / "rlx").mkdir()
    (cache_home / "rlx" / "rocm").symlink_to(target)
    assert cache.cache_dir() is None


def test_compiled_programs_are_cached_and_reused(cache_home):
    from rlx_core import Graph, Session
    g = Graph("cached")
    x = g.input("x", (5,))
    g.set_outputs([g.exp(x) + 1.0])
    Session("rocm").compile(g)
    files = list((cache_home / "rlx" / "rocm").glob("*.bin"))
    assert len(files) >= 1
    from rlx_rocm.opencl import open_device
    dev = open_device()
    dev._programs.clear()  # force the disk path
    out = Session("rocm").compile(g).run({"x": np.zeros(5, np.float32)})[0]
    np.testing.assert_array_equal(out, np.full(5, 2, np.float32))

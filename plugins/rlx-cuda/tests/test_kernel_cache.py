"""CuPy's kernel cache (cubins it loads and runs) goes only into a trusted folder; an
untrusted one keeps kernels in memory. Runs without CuPy or a GPU."""
import logging
import os
import stat
import sys

import pytest

from rlx_cuda import runtime


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    runtime.point_kernel_cache.cache_clear()
    yield monkeypatch
    runtime.point_kernel_cache.cache_clear()


def test_default_cache_folder_is_created_private(env, tmp_path):
    runtime.point_kernel_cache()
    folder = tmp_path / "cache" / "rlx" / "cuda-kernels"
    assert os.environ["CUPY_CACHE_DIR"] == str(folder) and "CUPY_CACHE_IN_MEMORY" not in os.environ
    if sys.platform != "win32":
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_a_cache_folder_others_may_write_is_not_used(env, tmp_path, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    env.setenv("CUPY_CACHE_DIR", str(shared))
    with caplog.at_level(logging.WARNING, logger="rlx.cuda"):
        runtime.point_kernel_cache()
        runtime.point_kernel_cache()
    assert os.environ["CUPY_CACHE_IN_MEMORY"] == "1"
    assert caplog.text.count("not using the kernel cache") == 1 and "group or others may write" in caplog.text

"""MLX's kernel folders: code MLX builds and then loads is never taken from a folder
another user could write (issue 20, item 1).

MLX's CPU device builds fused kernels into ``<tmp>/mlx/<version>/cpu`` and ``dlopen``s
them; the temporary directory is shared by every user, so whoever creates that folder
first could plant libraries there. Each case runs a fused graph in a child process whose
``TMPDIR`` is a folder of the test's (``mx.disable_compile`` lasts for a process)."""
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import mlx.core as mx
import pytest

from rlx_mlx import platform

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
# tanh(2x + 1) * x: MLX fuses the chain into one kernel it builds with the C++ compiler
CHILD = textwrap.dedent("""
    import numpy as np
    from rlx_core import Graph, Session
    g = Graph("fused")
    x = g.input("x", (64,))
    g.set_outputs([g.mul(g.tanh(g.add(g.mul(x, 2.0), 1.0)), x)])
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    got = Session("mlx").compile(g).run({"x": x})[0]
    np.testing.assert_allclose(got, np.tanh(2 * x + 1) * x, rtol=1e-5, atol=1e-6)
    print("ok")
""")


def _run_child(tmp: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TMP", "TEMP", "TEMPDIR")}
    env.update(TMPDIR=str(tmp), RLX_MLX_DEVICE="cpu", RLX_PLUGINS="mlx",
               PYTHONPATH=os.pathsep.join([str(PLUGIN_ROOT), env.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    return out


def _built(tmp: Path) -> list[Path]:
    return [p for p in tmp.rglob("*") if p.suffix in (".so", ".cpp", ".dylib", ".dll")]


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_missing_folders_are_made_private_and_used(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir(0o700)
    out = _run_child(tmp)
    folder = tmp / "mlx" / mx.__version__ / "cpu"
    assert [_mode(p) for p in (tmp / "mlx", folder.parent, folder)] == [0o700] * 3
    assert _mode(folder / "rlx-mlx-jit.lock") == 0o600
    assert "not letting MLX" not in out.stderr
    if platform.cpu_fusion():
        assert _built(tmp) and all(p.parent == folder for p in _built(tmp))


@pytest.mark.parametrize("opened", ["tmp", "mlx", "version", "cpu"])
def test_a_folder_others_may_write_is_not_used(tmp_path, opened):
    """A world-writable folder on the way (as one another user made would be): MLX builds
    and loads nothing there, the graph still runs (unfused), one warning says why."""
    tmp = tmp_path / "tmp"
    folders = {"tmp": tmp, "mlx": tmp / "mlx", "version": tmp / "mlx" / mx.__version__,
               "cpu": tmp / "mlx" / mx.__version__ / "cpu"}
    folders[opened].mkdir(0o700, parents=True)
    folders[opened].chmod(0o777)
    out = _run_child(tmp)
    assert out.stderr.count("not letting MLX build and load CPU kernels") == 1, out.stderr
    assert "group or others may" in out.stderr
    assert _built(tmp) == [] and not list(tmp.rglob("rlx-mlx-jit.lock"))


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a folder away needs root")
def test_another_users_folder_is_not_used(tmp_path):
    tmp = tmp_path / "tmp"
    (tmp / "mlx").mkdir(0o700, parents=True)
    os.chown(tmp / "mlx", 65534, 65534)  # nobody's
    out = _run_child(tmp)
    assert "owned by uid 65534" in out.stderr and _built(tmp) == []


def test_a_link_in_place_of_the_lock_file_is_refused(tmp_path, monkeypatch, caplog):
    tmp = tmp_path / "tmp"
    tmp.mkdir(0o700)
    for name in ("TMP", "TEMP", "TEMPDIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    folder = platform.jit_folder()
    assert folder == tmp / "mlx" / mx.__version__ / "cpu" and _mode(folder) == 0o700
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (folder / "rlx-mlx-jit.lock").symlink_to(victim)
    with caplog.at_level(logging.WARNING, "rlx.mlx"), platform.jit_lock():
        pass
    assert "is a symbolic link" in caplog.text and "rlx-mlx-jit.lock" in caplog.text
    assert victim.read_text() == "keep" and _mode(victim) != 0o600
    assert (folder / "rlx-mlx-jit.lock").is_symlink()


def test_std_temp_dir_follows_cpp_order(monkeypatch):
    for name in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
        monkeypatch.delenv(name, raising=False)
    assert platform.std_temp_dir() == Path("/tmp")
    monkeypatch.setenv("TEMPDIR", "/d")
    monkeypatch.setenv("TEMP", "/c")
    monkeypatch.setenv("TMP", "/b")
    assert platform.std_temp_dir() == Path("/b")  # TMP before TEMP, unlike Python's tempfile
    monkeypatch.setenv("TMPDIR", "/a")
    assert platform.std_temp_dir() == Path("/a")


@pytest.mark.parametrize("trusted", [True, False])
def test_ptx_cache_only_in_a_trusted_folder(tmp_path, monkeypatch, caplog, trusted):
    """MLX's CUDA build caches PTX in ``<tmp>/mlx/<version>/ptx`` unless MLX_PTX_CACHE_DIR
    says otherwise: pointed at a private folder, or at none (empty: in memory)."""
    folder = tmp_path / "ptx"
    if not trusted:
        folder.mkdir(0o777)
        folder.chmod(0o777)
    monkeypatch.setenv(platform.PTX_CACHE_ENV, str(folder))
    with caplog.at_level(logging.WARNING, "rlx.mlx"):
        platform.point_ptx_cache.__wrapped__()
    if trusted:
        assert os.environ[platform.PTX_CACHE_ENV] == str(folder) and _mode(folder) == 0o700 and not caplog.text
    else:
        assert os.environ[platform.PTX_CACHE_ENV] == "" and "group or others may write" in caplog.text

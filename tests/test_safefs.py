"""rlx_core.runtime.safefs: the one rule every cache, KV file and trace file follows --
folders 0700 that nobody else may write, trusted files (not links, this user's, writable
by nobody else), exclusive creation and atomic replacement without predictable names."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rlx_core.errors import CacheError
from rlx_core.runtime import safefs
from rlx_core.runtime.safefs import (UntrustedPathError, create_exclusive, file_problem, private_dir, read_trusted,
                                     write_atomic)

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and links")
ROOT = Path(__file__).resolve().parents[1]


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_untrusted_is_a_cache_error_and_a_permission_error():
    assert issubclass(UntrustedPathError, CacheError) and issubclass(UntrustedPathError, PermissionError)


@posix
def test_private_dir_creates_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        made = private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    assert made == tmp_path / "a" / "b" / "c"
    assert [_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
    assert private_dir(made) == made  # an existing trusted folder is fine
    os.chmod(made, 0o755)  # others may read, not write: still trusted
    assert private_dir(made) == made


@posix
@pytest.mark.parametrize("case", ["world-writable", "group-writable", "link", "a file"])
def test_private_dir_refuses(tmp_path, case):
    target = tmp_path / "cache"
    if case == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        target.symlink_to(tmp_path / "real")
    elif case == "a file":
        target.write_text("")
    else:
        target.mkdir()
        os.chmod(target, 0o777 if case == "world-writable" else 0o770)
    with pytest.raises(UntrustedPathError, match={"world-writable": "group or others may write",
                                                  "group-writable": "group or others may write",
                                                  "link": "symbolic link", "a file": "not a directory"}[case]):
        private_dir(target)


@posix
def test_nothing_is_created_under_a_folder_others_may_write(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UntrustedPathError, match="group or others may rename"):
        private_dir(shared / "rlx" / "cpu")
    assert list(shared.iterdir()) == []
    os.chmod(shared, 0o1777)  # sticky, like /tmp: others cannot rename what is ours
    assert private_dir(shared / "rlx" / "cpu") == shared / "rlx" / "cpu"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_another_users_folder_or_file_is_refused(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UntrustedPathError, match="owned by uid 65534"):
        private_dir(theirs)
    with pytest.raises(UntrustedPathError, match="owned by uid 65534"):
        private_dir(theirs / "inside")
    f = tmp_path / "f.json"
    f.write_text("{}")
    os.chown(f, 65534, 65534)
    assert "owned by uid 65534" in file_problem(f)
    with pytest.raises(UntrustedPathError):
        read_trusted(f)


@posix
def test_trusted_files(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"data")
    os.chmod(f, 0o644)
    assert file_problem(f) is None and read_trusted(f) == b"data"
    os.chmod(f, 0o664)
    assert "group or others may write" in file_problem(f)
    with pytest.raises(UntrustedPathError, match="group or others may write"):
        read_trusted(f)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    assert file_problem(link) == "is a symbolic link"
    (tmp_path / "elsewhere").write_bytes(b"planted")
    with pytest.raises(UntrustedPathError, match="symbolic link"):
        read_trusted(link)
    with pytest.raises(FileNotFoundError):
        read_trusted(tmp_path / "missing")


@posix
def test_create_exclusive_never_opens_what_is_there(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for name in ("victim", "link", "dangling"):
        with pytest.raises(FileExistsError):
            create_exclusive(tmp_path / name)
    assert victim.read_text() == "keep" and not (tmp_path / "nowhere").exists()
    fd = create_exclusive(tmp_path / "new")
    os.close(fd)
    assert _mode(tmp_path / "new") == 0o600


@posix
def test_write_atomic_uses_no_predictable_temporary_name(tmp_path):
    """``<path>.tmp<pid>`` (the old trace and calibration writers) followed a planted link."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "out.json"
    (tmp_path / f"out.json.tmp{os.getpid()}").symlink_to(victim)
    write_atomic(target, "new")
    write_atomic(target, b"newer", fsync=True)
    assert target.read_text() == "newer" and _mode(target) == 0o600 and victim.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["victim", "out.json", f"out.json.tmp{os.getpid()}"])
    (tmp_path / "folder").mkdir()
    with pytest.raises(OSError):
        write_atomic(tmp_path / "folder", "x")  # cannot replace a folder: the temporary is removed
    assert len(list(tmp_path.iterdir())) == 4


def test_cache_root_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert safefs.cache_root() == tmp_path / "rlx"
    monkeypatch.setenv("XDG_CACHE_HOME", "  ")
    assert safefs.cache_root() == Path.home() / ".cache" / "rlx"


def test_private_temp_dir_is_removed_at_exit(tmp_path):
    script = "from rlx_core.runtime.safefs import private_temp_dir; d = private_temp_dir('rlx-t-'); " \
             "(d / 'f').write_text('x'); print(d)"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()).parent == tmp_path and list(tmp_path.iterdir()) == []

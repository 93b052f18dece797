"""Opening rlx-wgpu sets XDG_RUNTIME_DIR when unset (Mesa wants one): to a private folder
in the cache, so no process leaves an ``rlx-xdg-*`` folder in the temp directory; when
the cache cannot be trusted, to a temporary folder removed at exit."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROBE = "import os; from rlx_wgpu.gpu import _adapters; _adapters(); print(os.environ['XDG_RUNTIME_DIR'])"


def _open_wgpu(tmp_path: Path, cache: Path) -> str:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(TMPDIR=str(tmp_path / "tmp"), XDG_CACHE_HOME=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "rlx-wgpu")]))
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode and "wgpu" in proc.stderr and "No module named" in proc.stderr:
        pytest.skip("wgpu-py is not installed")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(sys.platform == "win32", reason="XDG_RUNTIME_DIR is a POSIX desktop convention")
def test_no_folder_left_in_the_temp_directory(tmp_path):
    for _ in range(2):
        used = _open_wgpu(tmp_path, tmp_path / "cache")
    assert used == str(tmp_path / "cache" / "rlx" / "xdg-runtime")
    assert stat.S_IMODE(os.stat(used).st_mode) == 0o700
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.skipif(sys.platform == "win32", reason="XDG_RUNTIME_DIR is a POSIX desktop convention")
def test_untrusted_cache_uses_a_temporary_folder_removed_at_exit(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    used = _open_wgpu(tmp_path, shared)
    assert Path(used).parent == tmp_path / "tmp" and Path(used).name.startswith("rlx-xdg-")
    assert list((tmp_path / "tmp").iterdir()) == [] and not (shared / "rlx").exists()

"""The kernel cache under $XDG_CACHE_HOME/rlx: reused by a second process, rebuilt when
corrupt, replaced by a temporary directory when it cannot be written.

Each scenario runs a fresh interpreter (numba keeps compiled kernels in memory, so only
a new process shows what the disk cache does).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def _probe(cache_home: Path) -> tuple[dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "rlx-cpu")])}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
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
    (kernels / "decisions.json").write_text("{not json")
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

"""Long graphs: the scheduler's work grows linearly with the graph, and the kernels a long
chain is split into are cached on disk like any other (issue 20, item 16)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlx_core import Graph
from rlx_cpu.schedule import MAX_GROUP_NODES, schedule

ROOT = Path(__file__).resolve().parents[3]


def _chain(n: int) -> Graph:
    g = Graph("chain")
    y = g.input("x", (4,))
    for _ in range(n):
        y = g.add(y, 1.0)
    g.set_outputs([y])
    return g


def _residual(layers: int, d: int = 8) -> Graph:
    """Post-norm residual layers: anchors, norms and merges refused for cycles."""
    g = Graph("residual")
    x = g.input("x", (2, d))
    for i in range(layers):
        h = g.gelu(g.matmul(x, g.param(f"w{i}", (d, d))) + g.param(f"b{i}", (d,)))
        x = g.layer_norm(x + g.matmul(h, g.param(f"v{i}", (d, d))), g.param(f"g{i}", (d,)),
                         g.param(f"c{i}", (d,)), eps=1e-5)
    g.set_outputs([x])
    return g


def _work(graph: Graph) -> int:
    """Python calls and lines executed while scheduling ``graph``: a measure of work that
    does not depend on how busy the machine is."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        count += 1
        return tracer

    previous = sys.gettrace()  # a coverage tool's, say: given back after
    sys.settrace(tracer)
    try:
        schedule(graph)
    finally:
        sys.settrace(previous)
    return count


@pytest.mark.parametrize("build, small", [(_chain, 250), (_residual, 25)])
def test_scheduling_work_grows_linearly(build, small):
    """4x the nodes cost about 4x the work (it was 15x on chains, 12x on residual layers)."""
    ratio = _work(build(4 * small)) / _work(build(small))
    assert ratio < 6, ratio


# Compiles a chain of more than two full groups and reports how numba got its kernels.
PROBE = r"""
import json, numpy as np
from rlx_core import Graph, Session, evaluate
import rlx_cpu.jit as jit
g = Graph("long")
y = g.input("x", (3, 5))
for i in range(LENGTH):
    y = g.add(y, 0.25) if i % 2 else g.mul(y, 0.999)
g.set_outputs([y])
compiled = Session("cpu").compile(g)
feed = {"x": np.linspace(-2, 2, 15, dtype=np.float32).reshape(3, 5)}
np.testing.assert_allclose(compiled.run(feed)[0], evaluate(g, feed)[0], rtol=1e-5, atol=1e-6)
stats = [m.kernel.stats for m in jit._modules.values() if hasattr(m, "kernel")]
print(json.dumps({"steps": len(compiled.executable.steps),
                  "hits": sum(sum(s.cache_hits.values()) for s in stats),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats)}))
"""


def _probe(cache_home: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "rlx-cpu")])}
    code = PROBE.replace("LENGTH", str(2 * MAX_GROUP_NODES + 10))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_split_kernels_load_from_the_disk_cache(tmp_path):
    """Two distinct kernels (a full group, the rest) are compiled once, then loaded."""
    first = _probe(tmp_path)
    assert first == {"steps": 3, "hits": 0, "misses": 2}
    assert _probe(tmp_path) == {"steps": 3, "hits": 2, "misses": 0}

"""The CPU backend's memory plan and the arena contract."""
import tracemalloc

import numpy as np

from rlx_core import Graph, Session


def _chain(n=8, size=4096):
    g = Graph("chain")
    x = g.input("x", (size,))
    y = x
    for i in range(n):
        y = g.tanh(y) if i % 2 else y * 1.5
    g.set_outputs([y])
    return g


def _compiled(g):
    return Session("cpu").compile(g)


def test_values_with_disjoint_lifetimes_share_bytes():
    c = _compiled(_chain())
    plan = c.executable.plan
    nbytes = 4096 * 4
    # input + 16 intermediates (8 ops + 8 scalar constants aside) fit in a few buffers.
    assert plan.size <= 3 * nbytes
    placed = plan.placements
    for a, pa in placed.items():
        for b, pb in placed.items():
            if a != b and not (pa.last < pb.first or pb.last < pa.first):
                assert pa.offset + pa.nbytes <= pb.offset or pb.offset + pb.nbytes <= pa.offset, (a, b)


def test_arena_is_aligned():
    c = _compiled(_chain())
    assert c.executable.arena.ctypes.data % 64 == 0
    for ref, p in c.executable.plan.placements.items():
        assert p.offset % 64 == 0


def test_outputs_are_not_aliased_to_the_arena():
    c = _compiled(_chain(n=2, size=8))
    x = np.ones(8, np.float32)
    first = c.run({"x": x})[0]
    c.run({"x": 2 * x})
    np.testing.assert_allclose(first, np.tanh(1.5 * x), rtol=1e-6)


def test_steady_state_run_with_out_allocates_no_tensor_memory():
    for size in (256, 1 << 16):
        c = _compiled(_chain(size=size))
        x = np.random.default_rng(0).standard_normal(size).astype(np.float32)
        out = [np.empty(size, np.float32)]
        for _ in range(3):
            c.run({"x": x}, out=out)
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        c.run({"x": x}, out=out)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak - base < 4096, f"run allocated {peak - base} bytes at size {size}"

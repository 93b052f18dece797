"""Arena packing: buffers with disjoint lifetimes share bytes, overlapping ones never do."""
import itertools

import numpy as np

from rlx_core.runtime.arena import place


def test_disjoint_lifetimes_share_and_overlapping_ones_do_not():
    placements, size = place({"a": (0, 1, 100), "b": (2, 3, 100), "c": (1, 2, 10)}, alignment=64)
    assert placements["a"].offset == placements["b"].offset == 0  # a and b never live together
    assert placements["c"].offset == 128  # after a's (and b's) 100 bytes rounded to 128
    assert size == 192 and placements["c"].nbytes == 10


def test_random_plans_never_collide():
    rng = np.random.default_rng(0)
    for _ in range(50):
        buffers = {}
        for k in range(12):
            first = int(rng.integers(-1, 8))
            buffers[k] = (first, first + int(rng.integers(0, 4)), int(rng.integers(0, 500)))
        placements, size = place(buffers, alignment=16)
        for x, y in itertools.combinations(placements.values(), 2):
            assert x.offset % 16 == 0 and x.offset + x.nbytes <= size
            if not (x.last < y.first or y.last < x.first):
                assert x.offset + max(x.nbytes, 1) <= y.offset or y.offset + max(y.nbytes, 1) <= x.offset

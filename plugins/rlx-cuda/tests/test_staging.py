"""Host-side pieces of the run path (no GPU): where the upload graphs are cut, and the
threaded copy into the pinned mirror."""
import numpy as np
import pytest
import rlx_cuda.staging as staging
from rlx_core.errors import InputError
from rlx_cuda.staging import MAX_SEGMENTS, SEGMENT_BYTES, Upload, copy_to_mirror, upload_segments

BIG = SEGMENT_BYTES


def _ups(*specs):
    return [Upload(dst=i, src=i, nbytes=n, first=f, name=name) for i, (name, n, f) in enumerate(specs)]


def test_segments_start_where_large_inputs_are_first_read():
    ups = _ups(("x", 64, 0), ("k0", BIG, 3), ("v0", BIG, 3), ("small", 8, 5), ("k1", BIG, 9), ("unread", BIG, 12))
    segs = upload_segments(ups, 12)
    assert [(a, b) for a, b, _ in segs] == [(0, 3), (3, 9), (9, 12)]
    assert [[u.name for u in ups] for _, _, ups in segs] == [["x"], ["k0", "v0", "small"], ["k1", "unread"]]
    # re-indexed to the segment: k0 at its start, small 2 actions in, unread past the end (the join)
    assert [[u.first for u in ups] for _, _, ups in segs] == [[0], [0, 0, 2], [0, 3]]


def test_small_inputs_and_inputs_read_at_once_make_one_segment():
    ups = _ups(("a", BIG - 1, 4), ("b", 10 * BIG, 0))
    assert upload_segments(ups, 6) == [(0, 6, ups)]
    assert upload_segments([], 0) == [(0, 0, [])]


def test_at_most_max_segments_keeping_the_cuts_before_the_most_bytes():
    ups = _ups(*[(f"i{k}", BIG * (k + 1), k + 1) for k in range(MAX_SEGMENTS + 3)])
    segs = upload_segments(ups, 100)
    assert len(segs) == MAX_SEGMENTS
    starts = [a for a, _, _ in segs]
    assert starts == [0, *range(5, MAX_SEGMENTS + 4)]  # the cuts of the smallest inputs (1..4) are dropped
    assert sum(len(u) for _, _, u in segs) == len(ups)


@pytest.mark.parametrize("threads", [False, True])
def test_copy_to_mirror_copies_every_byte(monkeypatch, threads):
    if threads:
        from concurrent.futures import ThreadPoolExecutor
        monkeypatch.setattr(staging, "_POOL", ThreadPoolExecutor(3))
    else:
        monkeypatch.setattr(staging, "_POOL", False)
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((700, 300)).astype(np.float32), np.arange(7, dtype=np.int64),
              rng.standard_normal((3, 1000, 77)).astype(np.float16)[:, ::2]]  # strided: copied contiguous
    mirrors = [np.zeros(v.shape, v.dtype) for v in values]
    copy_to_mirror(list(zip(mirrors, values)))
    for m, v in zip(mirrors, values):
        np.testing.assert_array_equal(m, v)
    if threads:
        with pytest.raises(InputError, match="bytes where"):
            copy_to_mirror([(np.zeros(4 * staging._PIECE, np.uint8), np.zeros(3 * staging._PIECE, np.uint8))])

"""Calibration: measured numbers, the cache (atomic, corrupt files re-measured), the hook."""
import json

import pytest

from rlx_core.errors import RlxError
from rlx_core.runtime import Device, registry
from rlx_wgpu.calibrate import FINALISTS, KEYS, LARGE_TILES, MATMUL_KERNEL, SWITCH_MARGIN, TIMINGS, cache_path, \
    calibrate, load_calibration, measure
from rlx_wgpu.codegen.linalg import parse_tile
from rlx_wgpu.gpu import open_gpu

pytest.importorskip("wgpu")


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gpu = open_gpu("gpu")
    saved = gpu.tuning
    yield tmp_path
    gpu.tuning = saved


def test_measures_caches_and_tunes_the_matmul_tile(cache_home):
    first = calibrate("gpu", progress=lambda m: None, matmul_size=128)
    assert all(first[k] > 0 for k in KEYS)
    assert first["transfer_bw_gbps"] > 0 and first["software"] is (open_gpu("gpu").info["adapter_type"] == "CPU")
    assert first["matmul_tile"] in first["matmul_gflops_by_tile"] and first["matmul_kernel"] == MATMUL_KERNEL
    by_tile = first["matmul_gflops_by_tile"]
    fitting = [t for t in LARGE_TILES if parse_tile(t).workgroup_bytes <= open_gpu("gpu").workgroup_bytes]
    # the finalists (the fastest of the first pass, and the incumbent) were timed twice as often
    timings = first["matmul_timings"]
    finalists = [t for t, v in timings.items() if v == 2 * TIMINGS]
    assert len(finalists) in (FINALISTS, FINALISTS + 1) and sorted(timings.values()) == \
        [TIMINGS] * (len(fitting) - len(finalists)) + [2 * TIMINGS] * len(finalists)
    incumbent = fitting[0]  # no earlier calibration: the first tile that fits
    assert first["matmul_incumbent"] == incumbent and incumbent in finalists
    best = max(finalists, key=by_tile.get)  # the winner is a finalist, and must beat the incumbent clearly
    assert first["matmul_tile"] == (incumbent if by_tile[best] <= by_tile[incumbent] * (1 + SWITCH_MARGIN) else best)
    assert open_gpu("gpu").tuned_matmul_tile() == first["matmul_tile"]
    path = cache_path(open_gpu("gpu"))
    assert json.loads(path.read_text()) == first
    assert registry().calibrate("wgpu", Device.GPU) == first  # the hook reads the cache


def test_a_corrupt_cache_is_measured_again(cache_home):
    path = cache_path(open_gpu("gpu"))
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = calibrate("gpu", progress=lambda m: None, matmul_size=64)
    assert result["matmul_size"] == 64 and json.loads(path.read_text()) == result


def test_a_cache_without_transfer_and_software_is_measured_again(cache_home):
    stale = calibrate("gpu", progress=lambda m: None, matmul_size=64)
    path = cache_path(open_gpu("gpu"))
    path.write_text(json.dumps({k: v for k, v in stale.items() if k not in ("transfer_bw_gbps", "software")}))
    assert load_calibration(open_gpu("gpu")) is None


def test_a_cache_of_another_gemm_kernel_is_measured_again(cache_home):
    stale = calibrate("gpu", progress=lambda m: None, matmul_size=64)
    path = cache_path(open_gpu("gpu"))
    path.write_text(json.dumps({**stale, "matmul_kernel": MATMUL_KERNEL - 1}))
    assert load_calibration(open_gpu("gpu")) is None
    path.write_text(json.dumps({k: v for k, v in stale.items() if k != "matmul_kernel"}))
    assert load_calibration(open_gpu("gpu")) is None


@pytest.mark.parametrize("faster,kept", [(1.03, True), (1.10, False)])
def test_the_incumbent_tile_stays_unless_another_is_clearly_faster(monkeypatch, faster, kept):
    """A challenger within SWITCH_MARGIN of the tile the last calibration kept does not
    replace it (timings of near-equal tiles trade places from run to run); a clearly
    faster one does. Also where the incumbent is not among the first pass's fastest."""
    from rlx_wgpu import calibrate as calibration
    tiles = ("64x64x8/4x4/db", "64x64x8/4x4", "32x32x8/4x4")
    per_run = {"64x64x8/4x4/db": 1.0, "64x64x8/4x4": 1.0 / faster, "32x32x8/4x4": 2.0}  # seconds
    real = calibration.time_tiles

    def timed(gpu, exes, rounds, min_seconds=None):
        if set(exes) <= set(per_run):
            return {name: [per_run[name]] * rounds for name in exes}
        return real(gpu, exes, rounds, min_seconds)
    monkeypatch.setattr(calibration, "time_tiles", timed)
    monkeypatch.setattr(calibration, "FINALISTS", 1)  # the first pass's fastest, then the incumbent too
    result = measure(open_gpu("gpu"), 64, tiles=tiles, progress=lambda m: None, timings=1, incumbent=tiles[0])
    assert result["matmul_incumbent"] == tiles[0]
    assert result["matmul_tile"] == (tiles[0] if kept else tiles[1])
    assert result["matmul_timings"] == {tiles[0]: 2, tiles[1]: 2, tiles[2]: 1}


def test_tiles_beyond_the_workgroup_memory_are_not_tried():
    gpu = open_gpu("webgpu")  # the spec's 16 KiB
    result = measure(gpu, 64, tiles=("128x128x16/8x8/db", "64x64x8/4x4/db"), progress=lambda m: None, timings=1)
    assert result["matmul_gflops_by_tile"].keys() == {"64x64x8/4x4/db"} and result["matmul_tile"] == "64x64x8/4x4/db"
    with pytest.raises(RlxError, match="fits"):
        measure(gpu, 64, tiles=("128x128x16/8x8/db",), progress=lambda m: None)


def test_the_hook_ignores_other_backends():
    from rlx_wgpu import plugin
    assert plugin.rlx_calibrate(backend="cpu", device=Device.CPU, force=False) is None


def test_a_tile_counts_at_its_fastest_timing(monkeypatch):
    """Slow spells of the device only add time: a tile timed fast once and slow twice is
    faster than one timed alike three times a little slower (a median would say not)."""
    from rlx_wgpu import calibrate as calibration
    tiles = ("64x64x8/4x4/db", "64x64x8/4x4")
    per_run = {"64x64x8/4x4/db": [2.0, 2.0, 2.0], "64x64x8/4x4": [3.0, 1.0, 3.0]}  # seconds
    real = calibration.time_tiles

    def timed(gpu, exes, rounds, min_seconds=None):
        if set(exes) <= set(per_run):
            return {name: per_run[name][:rounds] for name in exes}
        return real(gpu, exes, rounds, min_seconds)
    monkeypatch.setattr(calibration, "time_tiles", timed)
    result = measure(open_gpu("gpu"), 64, tiles=tiles, progress=lambda m: None, timings=3, incumbent=tiles[0])
    assert result["matmul_tile"] == tiles[1]
    assert result["matmul_gflops_by_tile"][tiles[1]] == pytest.approx(2 * 64 ** 3 / 1.0 / 1e9)


def test_device_time_comes_from_gpu_timestamps_where_the_device_has_them():
    """A timed encoder reads the device's own clock: positive and within the wall time
    around the submit and its wait, summed over submits; an untimed one reports nothing."""
    import time
    import numpy as np
    from rlx_core.select.tuning import tiny_graph
    from rlx_wgpu.calibrate import _compiled
    from rlx_wgpu.encoder import Encoder
    gpu = open_gpu("gpu")
    if gpu.timestamp_period is None:
        pytest.skip(f"no GPU timestamps on {gpu.info.get('device')}: calibration times on the host")
    exe = _compiled(gpu, tiny_graph("m", lambda g, a, b: g.matmul(a, b), (96, 96), (96, 96)))
    for submits in (1, 3):
        ctx = Encoder(gpu, timed=True)
        start = time.perf_counter()
        for _ in range(submits):
            for _ in range(4):
                exe.encode(ctx)
            ctx.flush()
        gpu.sync()
        seconds = ctx.device_seconds()
        assert 0 < seconds <= time.perf_counter() - start
        assert len(ctx._resolved) == submits
    untimed = Encoder(gpu)
    exe.encode(untimed)
    untimed.flush()
    assert untimed.device_seconds() is None
    assert np.isfinite(gpu.timestamp_period)

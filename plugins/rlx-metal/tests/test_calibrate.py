"""Metal calibration: its own cache key, the tile and engine it picks, the hook."""
import json

import pytest

from rlx_core.runtime import Device, registry
from rlx_metal import plugin
from rlx_metal.calibrate import KEYS, METAL_TILES, cache_path, calibrate, load_calibration


@pytest.fixture
def gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gpu = registry().backend("metal").gpu
    saved = gpu.tuning
    yield gpu
    gpu.tuning = saved


def test_measures_with_metal_tiles_and_caches_under_its_own_key(gpu, tmp_path):
    result = calibrate(progress=lambda m: None, matmul_size=64)
    assert all(result[k] > 0 for k in KEYS)
    assert set(result["matmul_gflops_by_tile"]) == set(METAL_TILES)
    assert result["matmul_tile"] in METAL_TILES and result["gemm_engine"] in ("wgsl", "mps")
    path = cache_path(gpu)
    backend = gpu.info["backend_type"].lower()
    assert path.name.startswith(f"metal-calib-{backend}-") and path.parent == tmp_path / "rlx"
    assert json.loads(path.read_text()) == result
    assert [p.name for p in (tmp_path / "rlx").iterdir()] == [path.name]  # no rlx-wgpu cache written
    if backend != "metal":
        assert result["test_aid"] is True and result["gemm_engine"] == "wgsl" and result["mps_gflops"] is None
    assert gpu.tuned_matmul_tile() == result["matmul_tile"]
    assert calibrate(progress=lambda m: None) == result  # read back from the cache
    assert registry().calibrate("metal", Device("metal")) == result


def test_a_corrupt_or_stale_cache_is_measured_again(gpu):
    path = cache_path(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{not json")
    assert load_calibration(gpu) is None
    result = calibrate(progress=lambda m: None, matmul_size=32)
    assert result["matmul_size"] == 32
    path.write_text(json.dumps({**result, "gemm_engine": "cuda"}))
    assert load_calibration(gpu) is None
    path.write_text(json.dumps({**result, "matmul_tile": "3x3"}))
    assert load_calibration(gpu) is None


@pytest.mark.no_adapter
def test_the_hook_answers_for_metal_only():
    assert plugin.rlx_calibrate(backend="wgpu", device=Device.GPU, force=False) is None
    assert plugin.rlx_calibrate(backend="coreml-ane", device=Device("ane"), force=False) is None

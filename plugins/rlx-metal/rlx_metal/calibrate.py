"""Calibration of the ``metal`` device: what the cost model reads, and the tile and GEMM
engine the backend uses for large products.

Measured through ``rlx_wgpu.api.measure`` with Metal's own tile candidates
(:data:`METAL_TILES`: Apple GPUs have 32 KiB of threadgroup memory and 32-wide SIMD
groups, so smaller tiles than rlx-wgpu's defaults are tried too); the fastest becomes
``matmul_tile``. Where MPS is usable (macOS with pyobjc's MetalPerformanceShaders, on the
Metal adapter) the same product is timed through ``MPSMatrixMultiplication``, copies
included, as ``mps_gflops``; ``gemm_engine`` is ``"mps"`` when that is faster, else
``"wgsl"``, and ``sgemm_gflops`` is the faster of the two.

Cached in ``$XDG_CACHE_HOME/rlx`` (default ``~/.cache/rlx``) as
``metal-calib-<backend type>-<adapter>.json`` -- its own key: rlx-wgpu's caches are never
read, and figures measured in the Vulkan test mode never pose as Metal's. Written
atomically; a missing, corrupt or stale file is measured again.
``python -m rlx_metal.calibrate [--refresh] [--size N]`` prints the result as JSON.
"""
from __future__ import annotations

from pathlib import Path

from rlx_core.errors import RlxError
from rlx_core.select.tuning import cached_tuning, calibration_main, positive_figures, read_tuning, tuning_path
from rlx_wgpu import api

__all__ = ["METAL_TILES", "KEYS", "cache_path", "load_calibration", "load_tuning", "calibrate", "decide_engine"]

METAL_TILES = ("64x64x8/4x4", "64x64x16/4x4", "64x32x8/4x4", "32x32x8/4x4", "128x64x8/8x4", "128x128x8/8x8")
KEYS = ("sgemm_gflops", "memory_bw_gbps", "roundtrip_overhead_ns", "transfer_bw_gbps")
ENGINES = ("wgsl", "mps")


def cache_path(gpu) -> Path:
    backend = str(gpu.info.get("backend_type") or "unknown").lower()
    return tuning_path(f"metal-calib-{backend}", gpu.info.get("device"), gpu.info.get("description"))


def _valid(data) -> bool:
    if not positive_figures(data, KEYS):
        return False
    if data.get("gemm_engine") not in ENGINES or not isinstance(data.get("software"), bool):
        return False
    try:
        api.parse_tile(str(data.get("matmul_tile")))
    except RlxError:
        return False
    return True


def load_calibration(gpu) -> dict | None:
    """The cached Metal calibration of ``gpu``, or None (none, corrupt or stale)."""
    return read_tuning(cache_path(gpu), _valid)


def load_tuning(gpu) -> dict | None:
    """The ``tuning`` of the metal device spec: the cached calibration, if any."""
    return load_calibration(gpu)


def decide_engine(wgsl_gflops: float, mps_gflops: float | None) -> str:
    """``"mps"`` when MPS was measured faster than the best WGSL tile, else ``"wgsl"``."""
    return "mps" if mps_gflops is not None and mps_gflops > wgsl_gflops else "wgsl"


def calibrate(refresh: bool = False, progress=print, matmul_size: int | None = None) -> dict:
    """Measure (or read from the cache) the ``metal`` device as the settings name it now.
    ``matmul_size`` overrides the product's n (2048 on GPUs, 512 on CPU adapters)."""
    from rlx_core.runtime import registry

    from . import mps
    backend = registry().backend("metal")  # raises DeviceUnavailableError with the reason
    gpu = backend.gpu
    n = matmul_size or (512 if gpu.info.get("adapter_type") == "CPU" else 2048)
    gpu.tuning = cached_tuning(cache_path(gpu), _valid, lambda: _measure(gpu, n, progress, mps), refresh)
    return gpu.tuning


def _measure(gpu, n: int, progress, mps) -> dict:
    result = api.measure(gpu, n, tiles=METAL_TILES, progress=progress)
    wgsl = result["sgemm_gflops"]
    usable, reason = mps.available()
    on_metal = gpu.info.get("backend_type") == "Metal"
    mps_gflops = None
    if usable and on_metal:
        mps_gflops = mps.measure(n)
        progress(f"calibrate metal: MPS matmul {n}^3: {mps_gflops:.0f} GFLOP/s (copies included)")
        reason = "measured"
    elif usable:
        reason = "MPS needs the Metal adapter (this is the Vulkan test aid)"
    result.update({"wgsl_gflops": wgsl, "mps_gflops": mps_gflops, "mps": reason,
                   "gemm_engine": decide_engine(wgsl, mps_gflops),
                   "sgemm_gflops": max(wgsl, mps_gflops or 0.0), "test_aid": not on_metal})
    return result


def main(argv=None) -> int:
    return calibration_main(argv, prog="python -m rlx_metal.calibrate", description=__doc__.splitlines()[0],
                            calibrate=calibrate, size_help="matmul n (default 2048; 512 on CPU adapters)")


if __name__ == "__main__":
    raise SystemExit(main())

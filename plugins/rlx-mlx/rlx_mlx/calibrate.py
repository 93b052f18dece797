"""Calibration for the cost model: what the plugin's ``rlx_calibrate`` hook returns.

Every figure is measured through the backend itself -- small RLX graphs compiled by the
mlx backend, with inputs and outputs kept as MLX arrays unless said otherwise -- so it
describes RLX runs on this MLX build and device, not a datasheet:

* ``sgemm_gflops``: ``x @ x`` for an [n, n] f32 ``x`` (2 n**3 flops), n doubling from
  256 until one product takes ``GEMM_TARGET_S`` or n reaches 4096. MLX's Linux CPU wheel
  multiplies on a reference BLAS (a few GFLOP/s where numpy's OpenBLAS gets 100+), and
  this is where the cost model learns it.
* ``memory_bw_gbps``: ``x + 1`` over m f32 (bytes read plus bytes written).
* ``vector_gflops``: a chain of 8 multiply-adds over m f32, which ``mx.compile`` fuses
  (16 flops per element).
* ``dispatch_overhead_ns``: one run of a 4-element graph, MLX arrays in and out.
* ``roundtrip_overhead_ns``: the same through ``CompiledGraph`` with numpy in and out.
* ``transfer_bw_gbps``: host-to-device copy of m f32 on a CUDA GPU; None where MLX's
  device shares the host's memory (its CPU device, Apple silicon's unified memory).
* ``software``: True on MLX's CPU device (it computes on the host's cores, like the
  ``cpu`` device), False on a GPU.

Each figure is the median of ``repeats`` timed runs after a warm-up run.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from rlx_core.ir import Graph
from rlx_core.runtime import CompileOptions, compile_graph, registry
from rlx_core.select.calibration import report_progress
from rlx_core.select.tuning import fma_chain_graph, matmul_graph, median_seconds, stream_graph

__all__ = ["calibrate", "GEMM_TARGET_S"]

log = logging.getLogger("rlx.mlx.calibrate")
_ON_DEVICE = CompileOptions(backend={"outputs": "mlx"})
GEMM_TARGET_S = 0.02
_GEMM_SIZES = (256, 512, 1024, 2048, 4096)


def calibrate(*, elements: int = 1 << 22, repeats: int = 7, gemm_sizes=_GEMM_SIZES) -> dict:
    """Measure the mlx backend (see the module docstring); takes a second or two."""
    import mlx.core as mx
    backend = registry().backend("mlx")
    start = time.perf_counter()
    figures: dict = {}
    report_progress(0.05, "GEMM throughput")
    best = 0.0
    for n in gemm_sizes:
        seconds = _time_graph(backend, matmul_graph(n), repeats if n <= 1024 else 3)
        best = max(best, 2 * n ** 3 / seconds / 1e9)
        log.info("sgemm %dx%dx%d: %.1f GFLOP/s", n, n, n, 2 * n ** 3 / seconds / 1e9)
        if seconds >= GEMM_TARGET_S:
            break
    figures["sgemm_gflops"] = best
    report_progress(0.5, "memory bandwidth")
    nbytes = 4 * elements
    figures["memory_bw_gbps"] = 2 * nbytes / _time_graph(backend, stream_graph(elements), repeats) / 1e9
    report_progress(0.65, "vector throughput")
    figures["vector_gflops"] = 16 * elements / _time_graph(backend, fma_chain_graph(elements), repeats) / 1e9
    report_progress(0.8, "overheads")
    figures["dispatch_overhead_ns"] = _time_graph(backend, stream_graph(4), 10 * repeats) * 1e9
    tiny = compile_graph(backend, stream_graph(4), CompileOptions())
    host = np.ones(4, np.float32)
    figures["roundtrip_overhead_ns"] = median_seconds(lambda: tiny.run({"x": host}), 10 * repeats) * 1e9
    gpu = backend.device_kind == "gpu"
    figures["transfer_bw_gbps"] = None
    if gpu and backend.is_available().detail.get("gpu") == "CUDA":
        array = np.ones(elements, np.float32)
        with mx.stream(backend.mlx_device):
            upload = median_seconds(lambda: mx.eval(mx.array(array) + 0), repeats)
        figures["transfer_bw_gbps"] = nbytes / upload / 1e9
    figures["software"] = not gpu
    report_progress(1.0, "done")
    log.info("calibrated mlx (%s) in %.1f s: %s", backend.device_kind, time.perf_counter() - start, figures)
    return figures


def _time_graph(backend, graph: Graph, repeats: int) -> float:
    """Median seconds of one run of ``graph`` with its input already an MLX array (the
    executable is called directly: ``CompiledGraph`` checks numpy dtypes)."""
    import mlx.core as mx
    compiled = compile_graph(backend, graph, _ON_DEVICE)
    node = graph.input_nodes[0]
    with mx.stream(backend.mlx_device):
        x = mx.full(tuple(node.attrs["dims"]), 0.5, mx.float32)
        mx.eval(x)
    run = compiled.executable.run
    return median_seconds(lambda: mx.eval(run({"x": x})), repeats)


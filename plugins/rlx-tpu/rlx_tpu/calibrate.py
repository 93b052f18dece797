"""Calibration for the cost model: what the plugin's ``rlx_calibrate`` hook returns.

Every figure is measured through the backend itself -- small RLX graphs compiled by the
tpu backend, with inputs and outputs kept on the device as JAX arrays unless said
otherwise -- so it describes RLX runs on this platform, not bare XLA:

* ``sgemm_gflops``: ``x @ x`` for an [n, n] f32 ``x`` (2 n**3 flops).
* ``memory_bw_gbps``: ``x + 1`` over m f32 (bytes read plus bytes written).
* ``vector_gflops``: a chain of 8 multiply-adds over m f32, which XLA fuses (16 flops
  per element).
* ``dispatch_overhead_ns``: one run of a 4-element graph, device arrays in and out.
* ``roundtrip_overhead_ns``: the same through ``CompiledGraph`` with numpy in and out.
* ``transfer_bw_gbps``: host-to-device upload of m f32; None on XLA:CPU (no bus).

Each is the median of ``repeats`` timed runs after a warm-up run.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from rlx_core.ir import Graph
from rlx_core.runtime import CompileOptions, compile_graph, registry
from rlx_core.select.tuning import fma_chain_graph, matmul_graph, median_seconds, stream_graph

from .platform import x64

__all__ = ["calibrate"]

log = logging.getLogger("rlx.tpu.calibrate")
_ON_DEVICE = CompileOptions(backend={"outputs": "jax"})


def calibrate(*, gemm_size: int = 1024, elements: int = 1 << 22, repeats: int = 10) -> dict:
    """Measure the tpu backend (see the module docstring); takes a few seconds."""
    import jax
    backend = registry().backend("tpu")
    start = time.perf_counter()
    figures = {}
    n = gemm_size
    figures["sgemm_gflops"] = 2 * n ** 3 / _time_graph(backend, matmul_graph(n), repeats) / 1e9
    log.info("sgemm %dx%dx%d: %.1f GFLOP/s", n, n, n, figures["sgemm_gflops"])
    nbytes = 4 * elements
    figures["memory_bw_gbps"] = 2 * nbytes / _time_graph(backend, stream_graph(elements), repeats) / 1e9
    figures["vector_gflops"] = 16 * elements / _time_graph(backend, fma_chain_graph(elements), repeats) / 1e9
    figures["dispatch_overhead_ns"] = _time_graph(backend, stream_graph(4), 10 * repeats) * 1e9
    tiny = compile_graph(backend, stream_graph(4), CompileOptions())
    host = np.ones(4, np.float32)
    figures["roundtrip_overhead_ns"] = median_seconds(lambda: tiny.run({"x": host}), 10 * repeats) * 1e9
    figures["transfer_bw_gbps"] = None
    if backend.platform != "cpu":
        array = np.ones(elements, np.float32)
        device = jax.devices(backend.platform)[0]
        upload = median_seconds(lambda: jax.device_put(array, device).block_until_ready(), repeats)
        figures["transfer_bw_gbps"] = nbytes / upload / 1e9
    log.info("calibrated tpu (%s) in %.1f s: %s", backend.platform, time.perf_counter() - start, figures)
    return figures


def _time_graph(backend, graph: Graph, repeats: int) -> float:
    """Median seconds of one run of ``graph`` with its input already on the device."""
    import jax
    compiled = compile_graph(backend, graph, _ON_DEVICE)
    node = graph.input_nodes[0]
    with x64():
        x = jax.device_put(np.full(node.attrs["dims"], 0.5, np.float32), jax.devices(backend.platform)[0])
    return median_seconds(lambda: jax.block_until_ready(list(compiled.run({"x": x}))), repeats)


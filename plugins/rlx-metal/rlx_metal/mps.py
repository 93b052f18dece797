"""GEMM through Metal Performance Shaders (``MPSMatrixMultiplication``), for the ``metal``
device's large f32 matmuls when calibration measured it faster than rlx-wgpu's best tile.

wgpu does not hand out its ``MTLBuffer``s, so an MPS product is a host-kernel step of the
compiled graph (``rlx_wgpu.api``'s overrides): the run submits the work before it, reads
the operands (mapped in place on Apple silicon's unified memory), and :class:`MpsEngine`
wraps them in shared-storage ``MTLBuffer``s, encodes one batched
``MPSMatrixMultiplication`` and waits; the product is written back into the arena. The
copies cost little next to a large GEMM, and calibration times them as part of MPS.

NEVER RUN: this project has no Mac. The pyobjc calls below follow Apple's MPS API and
pyobjc's naming; on Linux the tests check everything around them with a numpy engine
(which nodes qualify, batching and broadcasting, the override plumbing, the decision).
"""
from __future__ import annotations

import functools
import importlib.util
import math
import sys
import time

import numpy as np

from rlx_core.ir import DType

__all__ = ["available", "engine", "MpsEngine", "eligible", "matmul_host", "overrides", "measure", "MIN_FLOPS"]

MIN_FLOPS = 2 * 256 ** 3  # smaller products stay in WGSL: the host step's submit dominates them


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """``(usable, reason)``: MPS needs macOS, pyobjc's MetalPerformanceShaders and a Metal device."""
    if sys.platform != "darwin":
        return False, "Metal Performance Shaders exist only on macOS"
    if importlib.util.find_spec("MetalPerformanceShaders") is None or importlib.util.find_spec("Metal") is None:
        return False, ("pyobjc-framework-MetalPerformanceShaders is not installed "
                       "(pip install pyobjc-framework-MetalPerformanceShaders)")
    try:
        import Metal
        device = Metal.MTLCreateSystemDefaultDevice()
    except Exception as e:  # pyobjc present but the framework fails to load
        return False, f"Metal could not be loaded: {type(e).__name__}: {e}"
    if device is None:
        return False, "MTLCreateSystemDefaultDevice() found no Metal device"
    return True, f"MPS on {device.name()}"


class MpsEngine:
    """Batched f32 GEMM ``(batch, m, k) @ (batch, k, n)`` on the default Metal device."""

    def __init__(self):
        import Metal
        import MetalPerformanceShaders as MPS
        self.Metal, self.MPS = Metal, MPS
        self.device = Metal.MTLCreateSystemDefaultDevice()
        self.queue = self.device.newCommandQueue()
        self._kernels: dict[tuple, object] = {}

    def _buffer(self, array: np.ndarray | None, nbytes: int):
        shared = self.Metal.MTLResourceStorageModeShared
        if array is None:
            return self.device.newBufferWithLength_options_(nbytes, shared)
        return self.device.newBufferWithBytes_length_options_(array.tobytes(), nbytes, shared)

    def _matrix(self, buffer, batch: int, rows: int, cols: int):
        MPS = self.MPS
        desc = MPS.MPSMatrixDescriptor.matrixDescriptorWithRows_columns_matrices_rowBytes_matrixBytes_dataType_(
            rows, cols, batch, cols * 4, rows * cols * 4, MPS.MPSDataTypeFloat32)
        return MPS.MPSMatrix.alloc().initWithBuffer_descriptor_(buffer, desc)

    def _kernel(self, m: int, n: int, k: int, batch: int):
        key = (m, n, k, batch)
        if key not in self._kernels:
            mm = self.MPS.MPSMatrixMultiplication.alloc() \
                .initWithDevice_transposeLeft_transposeRight_resultRows_resultColumns_interiorColumns_alpha_beta_(
                    self.device, False, False, m, n, k, 1.0, 0.0)
            mm.setBatchStart_(0)
            mm.setBatchSize_(batch)
            self._kernels[key] = mm
        return self._kernels[key]

    def gemm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        batch, m, k = a.shape
        n = b.shape[2]
        a = np.ascontiguousarray(a, np.float32)
        b = np.ascontiguousarray(b, np.float32)
        buf_a, buf_b = self._buffer(a, a.nbytes), self._buffer(b, b.nbytes)
        nbytes = batch * m * n * 4
        buf_c = self._buffer(None, nbytes)
        command = self.queue.commandBuffer()
        self._kernel(m, n, k, batch).encodeToCommandBuffer_leftMatrix_rightMatrix_resultMatrix_(
            command, self._matrix(buf_a, batch, m, k), self._matrix(buf_b, batch, k, n),
            self._matrix(buf_c, batch, m, n))
        command.commit()
        command.waitUntilCompleted()
        raw = buf_c.contents().as_buffer(nbytes)
        return np.frombuffer(raw, np.float32, count=batch * m * n).reshape(batch, m, n).copy()


@functools.lru_cache(maxsize=1)
def engine() -> MpsEngine:
    return MpsEngine()


def _dims(graph, node) -> tuple[int, int, int, int]:
    """``(batch, m, n, k)`` of a matmul node (rank-1 operands promoted as numpy does)."""
    a, b = (graph.shape_of(r).dims for r in node.inputs)
    m = 1 if len(a) == 1 else a[-2]
    k = a[-1]
    n = 1 if len(b) == 1 else b[-1]
    out = node.outputs[0].dims
    batch = math.prod(out[:len(out) - (len(a) > 1) - (len(b) > 1)])
    return batch, m, n, k


def eligible(graph, node, min_flops: int = MIN_FLOPS) -> bool:
    """Whether MPS takes this node: an f32 matmul of at least ``min_flops`` (2*b*m*n*k)."""
    if node.kind != "matmul" or graph.shape_of(node.inputs[0]).dtype is not DType.F32:
        return False
    batch, m, n, k = _dims(graph, node)
    return batch * m * n * k > 0 and 2 * batch * m * n * k >= min_flops


def matmul_host(gemm, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.matmul(a, b)`` computed by ``gemm((batch, m, k), (batch, k, n))``: rank-1
    operands promoted and batch dims broadcast as numpy does."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    aa = np.broadcast_to(a2, batch + (m, k)).reshape(-1, m, k)
    bb = np.broadcast_to(b2, batch + (k, n)).reshape(-1, k, n)
    out = gemm(aa, bb).reshape(batch + (m, n))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def overrides(gemm_engine, min_flops: int = MIN_FLOPS):
    """An ``rlx_wgpu.api`` overrides callable running eligible matmuls through ``gemm_engine.gemm``."""
    def kernel(node, inputs):
        return matmul_host(gemm_engine.gemm, inputs[0], inputs[1])

    def pick(graph, node):
        return kernel if eligible(graph, node, min_flops) else None
    return pick


def measure(n: int, gemm_engine=None, repeats: int = 3) -> float:
    """GFLOP/s of an ``n``^3 f32 product through ``gemm_engine`` (default: MPS), operand
    and result copies included (as a host-kernel step pays them); best of ``repeats``."""
    gemm_engine = gemm_engine or engine()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, n, n), dtype=np.float32)
    b = rng.standard_normal((1, n, n), dtype=np.float32)
    gemm_engine.gemm(a, b)  # warm-up: pipelines, allocations
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        gemm_engine.gemm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best / 1e9

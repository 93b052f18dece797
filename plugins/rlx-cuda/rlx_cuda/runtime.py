"""The seam to CuPy: the only module (with ``tail`` and ``executable``) that imports it.

:func:`import_cupy` is the one import point, so tests and the availability probe can
replace it. A :class:`Runtime` is one CUDA device as the backend uses it: kernels
compiled with NVRTC through ``cupy.RawModule`` (memoized in the process; CuPy caches
the binaries on disk across processes in ``CUPY_CACHE_DIR``, which defaults here to
``$XDG_CACHE_HOME/rlx/cuda-kernels``), a cuBLAS handle of its own, and the helpers
that move memory.

A cached binary is code CuPy loads and runs, so the cache folder must be trusted
(``rlx_core.runtime.safefs``: created 0700, a real folder of this user's that nobody
else may write); otherwise CuPy keeps kernels in memory (``CUPY_CACHE_IN_MEMORY=1``)
after one warning. CuPy itself writes its files 0600 and atomically.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import threading

import numpy as np
from rlx_core.runtime.safefs import cache_root, private_dir

from .kernels.preamble import KERNEL_NAME

__all__ = ["import_cupy", "Runtime", "kernel_cache_dir", "point_kernel_cache", "NVRTC_OPTIONS"]

NVRTC_OPTIONS = ("-std=c++17",)
_MEMCPY_D2D = 3
_GEMM_DEFAULT_ALGO = -1


def kernel_cache_dir() -> str:
    return str(cache_root() / "cuda-kernels")


@functools.lru_cache(maxsize=1)
def point_kernel_cache() -> None:
    """Point CuPy's kernel cache at ``CUPY_CACHE_DIR`` (default :func:`kernel_cache_dir`)
    if that folder is trusted, else keep kernels in memory (one warning per process)."""
    if os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0"):
        return
    folder = os.environ.get("CUPY_CACHE_DIR") or kernel_cache_dir()
    try:
        private_dir(folder)
        os.environ["CUPY_CACHE_DIR"] = folder
    except OSError as e:  # UntrustedPathError included
        logging.getLogger("rlx.cuda").warning("rlx-cuda: not using the kernel cache (%s); CuPy compiles kernels "
                                              "in memory for this process", e)
        os.environ["CUPY_CACHE_IN_MEMORY"] = "1"


def import_cupy():
    """Import CuPy, its kernel cache pointed at a trusted folder (:func:`point_kernel_cache`)."""
    point_kernel_cache()
    import cupy
    return cupy


class Runtime:
    """One CUDA device: compiled kernels, a cuBLAS handle, memory helpers."""

    _instances: dict[int, "Runtime"] = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, index: int = 0) -> "Runtime":
        with cls._lock:
            if index not in cls._instances:
                cls._instances[index] = cls(index)
            return cls._instances[index]

    def __init__(self, index: int = 0):
        self.cp = import_cupy()
        self.index = index
        self.device = self.cp.cuda.Device(index)
        with self.device:
            self.props = self.cp.cuda.runtime.getDeviceProperties(index)
            # A workspace of our own keeps cuBLAS from allocating during graph capture.
            self._workspace = self.cp.cuda.alloc(32 << 20)
            self.cublas = Cublas(self._workspace.ptr, 32 << 20)
        self._kernels: dict[str, object] = {}
        self._kernel_lock = threading.Lock()

    @property
    def name(self) -> str:
        name = self.props.get("name", b"?")
        return name.decode() if isinstance(name, bytes) else str(name)

    def kernel(self, source: str):
        """The compiled ``rlx_kernel`` of ``source`` (compiled once per process)."""
        with self._kernel_lock:
            fn = self._kernels.get(source)
            if fn is None:
                with self.device:
                    module = self.cp.RawModule(code=source, options=NVRTC_OPTIONS)
                    fn = module.get_function(KERNEL_NAME)
                self._kernels[source] = fn
            return fn

    def alloc(self, nbytes: int):
        with self.device:
            return self.cp.cuda.alloc(max(nbytes, 1))

    def view(self, ptr, offset: int, dims, dtype):
        """A CuPy array of ``dims``/``dtype`` over device memory ``ptr + offset`` (no copy)."""
        return self.cp.ndarray(tuple(dims), dtype=dtype, memptr=ptr + offset)

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        if nbytes:
            self.cp.cuda.runtime.memcpyAsync(dst, src, nbytes, _MEMCPY_D2D, stream.ptr)

    def memset(self, dst: int, value: int, nbytes: int, stream) -> None:
        if nbytes:
            self.cp.cuda.runtime.memsetAsync(dst, value, nbytes, stream.ptr)

    def gemm(self, g, a: int, b: int, c: int, alpha: np.ndarray, beta: np.ndarray) -> None:
        """One ``cublasGemmStridedBatchedEx`` on CuPy's current stream."""
        self.cublas.gemm_strided_batched(self.cp.cuda.get_current_stream().ptr, g, a, b, c,
                                         alpha.ctypes.data, beta.ctypes.data)


class Cublas:
    """cuBLAS called through ctypes on a handle of our own.

    CuPy's bindings refuse every cuBLAS call while a stream is capturing ("calling cuBLAS
    API during stream capture is currently unsupported", cupy/cupy#6290), although cuBLAS
    itself supports capture when the handle has a user workspace (so it never allocates)
    and scalars are host values (baked into the graph). This class does exactly that; the
    library is the one CuPy already loaded into the process.
    """

    def __init__(self, workspace: int, workspace_bytes: int):
        import cupy_backends.cuda.libs.cublas  # noqa: F401  (loads libcublas into the process)
        self.lib = ctypes.CDLL(_loaded_library("libcublas.so") or ctypes.util.find_library("cublas"))
        v, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        self.lib.cublasGemmStridedBatchedEx.argtypes = [
            v, i, i, i, i, i, v, v, i, i, ll, v, i, i, ll, v, v, i, i, ll, i, i, i]
        self.lib.cublasSetStream_v2.argtypes = [v, v]
        self.lib.cublasSetWorkspace_v2.argtypes = [v, v, ctypes.c_size_t]
        self.handle = v()
        self._check("cublasCreate_v2", self.lib.cublasCreate_v2(ctypes.byref(self.handle)))
        self._check("cublasSetWorkspace_v2", self.lib.cublasSetWorkspace_v2(self.handle, workspace, workspace_bytes))

    def gemm_strided_batched(self, stream: int, g, a: int, b: int, c: int, alpha: int, beta: int) -> None:
        self._check("cublasSetStream_v2", self.lib.cublasSetStream_v2(self.handle, stream))
        self._check("cublasGemmStridedBatchedEx", self.lib.cublasGemmStridedBatchedEx(
            self.handle, g.transa, g.transb, g.m, g.n, g.k, alpha, a, g.data_types[0], g.lda, g.stride_a,
            b, g.data_types[1], g.ldb, g.stride_b, beta, c, g.data_types[2], g.ldc, g.stride_c, g.batch,
            g.compute, _GEMM_DEFAULT_ALGO))

    @staticmethod
    def _check(what: str, status: int) -> None:
        if status:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")


def _loaded_library(stem: str) -> str | None:
    """The path of a shared library already mapped into this process (``stem`` = file prefix)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None

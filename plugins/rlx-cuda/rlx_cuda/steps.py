"""What a compiled CUDA graph is made of, as plain data: steps and their device actions.

Lowering (``rlx_cuda.lower``) turns a graph into :class:`Step` s without touching a GPU,
so kernel sources, launch geometry, GEMM parameters and the memory plan can all be
checked on a machine without CUDA. The executable binds them to device memory.

A step reads and writes graph values (``Ref`` s) and may use ``scratch`` bytes of the
arena for its own duration. Its actions refer to memory through :class:`Buf`: a value
(``ref``) or the step's scratch (``ref=None``), plus a byte offset.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rlx_core.ir import Node, Ref

__all__ = ["Buf", "Launch", "Gemm", "Copy", "Memset", "Host", "Step"]


@dataclass(frozen=True)
class Buf:
    """Device memory: value ``ref`` (None = the step's scratch) at ``offset`` bytes."""

    ref: Ref | None
    offset: int = 0


@dataclass(frozen=True)
class Launch:
    """One launch of an NVRTC-compiled kernel (entry point ``rlx_kernel``)."""

    source: str
    grid: int
    block: int
    args: tuple[Any, ...]  # Buf or numpy scalars (np.int64 ...), in the kernel's parameter order


@dataclass(frozen=True)
class Gemm:
    """``cublasGemmStridedBatchedEx`` in cuBLAS's column-major terms (see ``lower.gemm``).
    ``data_types`` are cudaDataType_t of A, B, C; ``compute`` a cublasComputeType_t."""

    a: Buf
    b: Buf
    c: Buf
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int
    data_types: tuple[int, int, int]
    compute: int
    scalar: np.dtype  # dtype of the host alpha (= 1) and beta (= 0)


@dataclass(frozen=True)
class Copy:
    """Device-to-device copy of ``nbytes``."""

    dst: Buf
    src: Buf
    nbytes: int


@dataclass(frozen=True)
class Memset:
    dst: Buf
    nbytes: int
    value: int = 0


@dataclass(frozen=True)
class Host:
    """Work driven from the host (CuPy library calls, control flow): never captured."""

    node: Node


@dataclass
class Step:
    label: str
    reads: tuple[Ref, ...]
    writes: tuple[Ref, ...]
    actions: list = field(default_factory=list)
    scratch: int = 0

    @property
    def capturable(self) -> bool:
        """Whether a CUDA graph can record this step (no host work, no allocation)."""
        return not any(isinstance(a, Host) for a in self.actions)

    def sources(self) -> list[str]:
        return [a.source for a in self.actions if isinstance(a, Launch)]

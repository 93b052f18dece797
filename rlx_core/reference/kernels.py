"""The table of reference kernels: one plain-numpy function per op kind.

``@kernel("softmax")`` registers ``fn(*inputs, **attrs) -> array | tuple of arrays``.
Kernels that need the run context (rng settings, subgraph evaluation) are registered
with ``context=True`` and receive it first: ``fn(ctx, *inputs, **attrs)``.

Rules every kernel can rely on (the interpreter enforces them): inputs are numpy
arrays of the node's input dtypes, except that f16/bf16 arrays arrive as f32 -- 16-bit
floats are computed in f32 and rounded once to the node's dtype afterwards. Kernels
must return the node's output shape and dtype (low floats: any float).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import GraphError

__all__ = ["kernel", "RefKernel", "get_kernel", "has_kernel", "KERNELS"]


@dataclass(frozen=True)
class RefKernel:
    kind: str
    fn: Callable
    context: bool = False


KERNELS: dict[str, RefKernel] = {}


def kernel(kind: str, *, context: bool = False, replace: bool = False):
    def deco(fn):
        if kind in KERNELS and not replace:
            raise GraphError(f"reference kernel for '{kind}' is already registered")
        KERNELS[kind] = RefKernel(kind, fn, context)
        return fn
    return deco


def has_kernel(kind: str) -> bool:
    return kind in KERNELS


def get_kernel(kind: str) -> RefKernel:
    try:
        return KERNELS[kind]
    except KeyError:
        raise GraphError(f"no reference kernel for op kind '{kind}'") from None

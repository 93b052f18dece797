"""The reference interpreter: plain numpy, one small kernel per op kind, the oracle.

Importing this package registers every built-in kernel.
"""
from . import (control, conv, elementwise, fft, linalg, movement, nn, quant, random, reduce,  # noqa: F401
               sources)
from .interpreter import RefContext, evaluate, run_node
from .kernels import RefKernel, get_kernel, has_kernel, kernel

__all__ = ["evaluate", "run_node", "RefContext", "kernel", "get_kernel", "has_kernel", "RefKernel"]

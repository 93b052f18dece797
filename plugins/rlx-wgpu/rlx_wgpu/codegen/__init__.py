"""WGSL kernel generators, one module per op family (importing this registers them all)."""
from . import conv, elementwise, fft, linalg, movement, nn, quant, random, reduce  # noqa: F401
from .base import GENERATORS, KernelContext, generator
from .elementwise import fused_kernel

__all__ = ["GENERATORS", "KernelContext", "generator", "fused_kernel"]

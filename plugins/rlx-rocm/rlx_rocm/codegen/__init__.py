"""OpenCL C generation, one module per op family. ``GENERATORS`` maps an op kind to the
function that adds its dispatches to a ``KernelContext``."""
from .base import Dispatch, KernelContext, Scratch, SeedArg
from .elementwise import ELEMENTWISE_KINDS, fused_kernel
from .preamble import preamble

GENERATORS: dict = {}


def _register(module) -> None:
    GENERATORS.update(module.GENERATORS)


def _load() -> None:
    from . import movement, reduce, linalg, nn, conv, misc
    for m in (movement, reduce, linalg, nn, conv, misc):
        _register(m)


_load()

__all__ = ["Dispatch", "KernelContext", "Scratch", "SeedArg", "ELEMENTWISE_KINDS", "fused_kernel", "preamble",
           "GENERATORS"]

"""The contract between the executable and the kernel generators.

A generator turns one node into dispatches: ``@generator("softmax") def gen(k)`` reads the
node through a :class:`KernelContext` ``k`` and calls ``k.emit(source, slots, grid)`` once
per compute pass it needs (most need one; an FFT needs one per stage). ``slots`` name what
each binding of the shader holds: a graph value (a :class:`Ref`) or a scratch region the
node asked for with ``k.scratch(nbytes)``, which the memory planner places like any value
that lives only during this node's step, or compile-time data (a twiddle table, a fill
pattern) given with ``k.data(array)``, uploaded once like a constant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from rlx_core.ir import DType, Graph, Node, Ref, Shape

from ..layout import Layout, layout

__all__ = ["Scratch", "Data", "Seeds", "Dispatch", "KernelContext", "generator", "GENERATORS", "load", "store",
           "rounded"]


@dataclass(frozen=True)
class Scratch:
    """Temporary region ``index`` of the step that runs node ``node``. (Slots are
    dataclasses, not tuples, so that they never compare equal to a ``Ref``.)"""

    node: int
    index: int


@dataclass(frozen=True)
class Data:
    """Compile-time data region ``index`` of node ``node`` (persistent, uploaded once)."""

    node: int
    index: int


@dataclass(frozen=True)
class Seeds:
    """The per-run region of rng node ``node``: its stream seed (2 words), then zeros."""

    node: int


@dataclass(frozen=True)
class Dispatch:
    source: str
    slots: tuple  # Ref | Scratch per binding, in binding order
    grid: tuple[int, int, int]


@dataclass
class KernelContext:
    graph: Graph
    node: Node
    gpu: object  # rlx_wgpu.gpu.Gpu (or any object with f16, limits, workgroup_bytes)
    options: Mapping = field(default_factory=dict)  # CompileOptions.backend
    dispatches: list[Dispatch] = field(default_factory=list)
    scratch_sizes: list[int] = field(default_factory=list)
    data_arrays: list = field(default_factory=list)

    @property
    def attrs(self):
        return self.node.attrs

    @property
    def ins(self) -> list[Shape]:
        return [self.graph.shape_of(r) for r in self.node.inputs]

    @property
    def outs(self) -> list[Shape]:
        return list(self.node.outputs)

    def input(self, i: int) -> Ref:
        return self.node.inputs[i]

    def output(self, i: int = 0) -> Ref:
        return Ref(self.node.id, i)

    def layout(self, dtype: DType) -> Layout:
        return layout(dtype, self.gpu.f16)

    def storage(self, dtype: DType) -> str:
        return self.layout(dtype).storage

    def scratch(self, nbytes: int) -> Scratch:
        self.scratch_sizes.append(max(4, (int(nbytes) + 3) // 4 * 4))
        return Scratch(self.node.id, len(self.scratch_sizes) - 1)

    def data(self, array) -> Data:
        """A persistent region holding ``array``'s bytes (little endian, as numpy lays them out)."""
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        pad = (-raw.size) % 4 or (4 if raw.size == 0 else 0)
        self.data_arrays.append(np.concatenate([raw, np.zeros(pad, np.uint8)]))
        return Data(self.node.id, len(self.data_arrays) - 1)

    def emit(self, source: str, slots, grid_: tuple[int, int, int]) -> None:
        self.dispatches.append(Dispatch(source, tuple(slots), tuple(grid_)))

    @property
    def max_grid(self) -> int:
        return self.gpu.limits["max-compute-workgroups-per-dimension"]


GENERATORS: dict[str, Callable[[KernelContext], None]] = {}


def generator(*kinds: str):
    """Register ``fn(k: KernelContext)`` as the kernel generator of ``kinds``."""
    def deco(fn):
        for kind in kinds:
            GENERATORS[kind] = fn
        return fn
    return deco


# --- typed loads and stores ----------------------------------------------------------------
def load(dtype: DType, expr: str) -> str:
    """A stored element (``expr``) as its compute value (f16 -> f32, bool word -> bool)."""
    if dtype is DType.F16:
        return f"f32({expr})"
    if dtype is DType.BOOL:
        return f"({expr} != 0u)"
    return expr


def store(dtype: DType, expr: str) -> str:
    """A compute value as the element to store (f32 -> f16, bool -> 0/1 word)."""
    if dtype is DType.F16:
        return f"f16({expr})"
    if dtype is DType.BOOL:
        return f"select(0u, 1u, {expr})"
    return expr


def rounded(dtype: DType, expr: str) -> str:
    """A computed f32 rounded to ``dtype`` (and back) where it is a 16-bit float: the
    reference rounds every op's result once, so fused chains must too."""
    return f"f32(f16({expr}))" if dtype is DType.F16 else expr


"""Steps of a compiled graph: what each reads, writes and needs in the arena, and how it
is enqueued.

* :class:`KernelStep`: the dispatches of one node or of a fused elementwise group.
* :class:`RngStep`: an rng node. In ``philox`` mode its kernel draws on the device, keyed
  by two kernel arguments set from the run's rng options; in ``ort``/``zero`` mode the
  host draws (``rlx_core.rng.draw``: onnxruntime's sequential engine has no parallel form)
  and the step copies the numbers in.

Control-flow steps are in :mod:`rlx_rocm.control`. Every step has ``index``, ``reads``,
``writes``, ``scratch_sizes``, ``bind(exe)`` (after the arena exists) and ``enqueue(exe)``.
"""
from __future__ import annotations

import numpy as np

from rlx_core.ir import Node, Ref
from rlx_core.passes.fusion import step_io
from rlx_core.rng import combine_seed, draw

from .codegen.base import KernelContext, Scratch, SeedArg

__all__ = ["KernelStep", "RngStep", "RNG_KINDS"]

RNG_KINDS = frozenset({"rng_uniform", "rng_normal"})


class KernelStep:
    def __init__(self, index: int, nodes: tuple[Node, ...], k: KernelContext):
        self.index = index
        self.nodes = nodes
        self.dispatches = k.dispatches
        self.scratch_sizes = k.scratch_sizes
        self.reads, self.writes = step_io(nodes)
        self._bound: list = []
        self._seeds: list = []

    @property
    def label(self) -> str:
        return self.nodes[-1].label if len(self.nodes) == 1 else f"fused[{', '.join(n.label for n in self.nodes)}]"

    def bind(self, exe) -> None:
        self._bound = []
        for d in self.dispatches:
            kernel = exe.kernel(d.name)
            i = 0
            for arg in d.args:
                if isinstance(arg, SeedArg):
                    kernel.set_arg(i, np.uint32(0))
                    self._seeds.append((kernel, i, arg))
                elif isinstance(arg, (Ref, Scratch)):  # the arena and the slot's byte offset
                    buffer, offset = exe.argument(arg)
                    kernel.set_arg(i, buffer)
                    i += 1
                    kernel.set_arg(i, np.uint64(offset))
                else:
                    kernel.set_arg(i, arg)
                i += 1
            self._bound.append((kernel, d.gsize, d.lsize))

    def enqueue(self, exe) -> None:
        cl, q = exe.cl, exe.queue
        for kernel, gsize, lsize in self._bound:
            cl.enqueue_nd_range_kernel(q, kernel, gsize, lsize)


class RngStep(KernelStep):
    """An rng node (see the module docstring); ``exe.rng`` is read at every enqueue."""

    def __init__(self, index: int, node: Node, k: KernelContext):
        super().__init__(index, (node,), k)
        self.node = node
        self._host = None  # the numbers of the latest ort/zero draw (alive until the run ends)

    def enqueue(self, exe) -> None:
        a, out = self.node.attrs, self.node.outputs[0]
        if exe.rng.mode == "philox":
            stream = combine_seed(a["seed"] if a["seed"] is not None else exe.rng.seed, a["key"])
            for kernel, i, arg in self._seeds:
                kernel.set_arg(i, np.uint32((stream >> (32 * arg.word)) & 0xFFFFFFFF))
            super().enqueue(exe)
            return
        dist, lo, hi = ("uniform", a["low"], a["high"]) if self.node.kind == "rng_uniform" \
            else ("normal", a["mean"], a["scale"])
        self._host = np.ascontiguousarray(draw(exe.rng, dist, out.size, key=a["key"], seed=a["seed"], a=lo, b=hi,
                                               dtype=out.dtype.np))
        exe.write_async(Ref(self.node.id), self._host)

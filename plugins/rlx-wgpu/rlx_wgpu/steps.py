"""Steps of a compiled graph: what each one reads, writes and needs in the arena, and how
it is encoded into a run.

* :class:`KernelStep`: the dispatches of one node or one fused elementwise group.
* :class:`RngStep`: an rng node. In ``philox`` mode its kernel draws the numbers on the
  device from per-run seeds the host writes; in ``ort`` and ``zero`` mode the host draws
  them (``rlx_core.rng.draw``: onnxruntime's sequential engine has no parallel form) and
  the step copies them in.

* :class:`HostStep`: a node a caller's override runs on the host (``rlx_wgpu.api``):
  the run submits what came before, reads the node's inputs, calls the kernel and
  writes its outputs back before the next step.

Control-flow steps are in :mod:`rlx_wgpu.control`. Every step has ``index``, ``reads``,
``writes``, ``items()`` (its scratch, data and seed regions for the planner),
``bind(exe)`` (after the arena exists) and ``encode(exe, ctx)``.
"""
from __future__ import annotations

import numpy as np

from rlx_core.ir import Node, Ref
from rlx_core.passes.fusion import step_io
from rlx_core.rng import combine_seed, draw

from .codegen.base import Data, KernelContext, Scratch, Seeds
from .layout import device_nbytes, to_device
from .plan import Item

__all__ = ["KernelStep", "RngStep", "HostStep", "FOREVER", "RNG_KINDS"]

FOREVER = 1 << 40  # the "last" step of regions that live across runs
RNG_KINDS = frozenset({"rng_uniform", "rng_normal"})


class KernelStep:
    host_writes = False  # whether encoding writes per-run data from the host

    def __init__(self, index: int, nodes: tuple[Node, ...], k: KernelContext):
        self.index = index
        self.nodes = nodes
        self.dispatches = k.dispatches
        self.scratch_sizes = k.scratch_sizes
        self.data_arrays = k.data_arrays
        self.reads, self.writes = step_io(nodes)
        self._bound: list = []

    @property
    def label(self) -> str:
        return self.nodes[-1].label if len(self.nodes) == 1 else f"fused[{', '.join(n.label for n in self.nodes)}]"

    def items(self) -> list[Item]:
        root = self.nodes[-1].id
        return ([Item(Scratch(root, i), n, self.index, self.index) for i, n in enumerate(self.scratch_sizes)]
                + [Item(Data(root, i), a.size, -1, FOREVER) for i, a in enumerate(self.data_arrays)])

    def bind(self, exe) -> None:
        root = self.nodes[-1].id
        for i, arr in enumerate(self.data_arrays):
            exe.write(Data(root, i), arr)
        self._bound = [(exe.gpu.pipeline(d.source, len(d.slots)), exe.bind_group(d.slots), d.grid)
                       for d in self.dispatches]

    def encode(self, exe, ctx) -> None:
        for pipeline, bind_group, grid in self._bound:
            ctx.dispatch(pipeline, bind_group, grid)


class RngStep(KernelStep):
    """An rng node (see the module docstring); ``exe.rng`` is read at every encode."""

    host_writes = True

    def __init__(self, index: int, node: Node, k: KernelContext):
        super().__init__(index, (node,), k)
        self.node = node
        self._staging = None

    def items(self) -> list[Item]:
        return super().items() + [Item(Seeds(self.node.id), 16, -1, FOREVER)]

    def encode(self, exe, ctx) -> None:
        a, out = self.node.attrs, self.node.outputs[0]
        if exe.rng.mode == "philox":
            stream = combine_seed(a["seed"] if a["seed"] is not None else exe.rng.seed, a["key"])
            exe.write(Seeds(self.node.id), np.array([stream & 0xFFFFFFFF, stream >> 32, 0, 0], np.uint32))
            super().encode(exe, ctx)
            return
        dist, lo, hi = ("uniform", a["low"], a["high"]) if self.node.kind == "rng_uniform" \
            else ("normal", a["mean"], a["scale"])
        values = draw(exe.rng, dist, out.size, key=a["key"], seed=a["seed"], a=lo, b=hi, dtype=out.dtype.np)
        if self._staging is None:
            self._staging = exe.gpu.storage_buffer(device_nbytes(out), "rng staging")
        exe.gpu.device.queue.write_buffer(self._staging, 0, to_device(values, out.dtype))
        offset, nbytes = exe.region(Ref(self.node.id))
        ctx.copy(self._staging, 0, exe.arena, offset, nbytes)


class HostStep:
    """A node run by a host kernel ``kernel(node, inputs) -> array | sequence of arrays``
    (inputs: host arrays of the node's input shapes; one result per output, of the
    output's dims, cast to its dtype)."""

    host_writes = True

    def __init__(self, index: int, node: Node, kernel):
        self.index = index
        self.node = node
        self.nodes = (node,)
        self.kernel = kernel
        self.label = f"{node.label} (host)"
        self.reads = list(node.inputs)
        self.writes = [Ref(node.id, i) for i in range(len(node.outputs))]

    def items(self) -> list[Item]:
        return []

    def bind(self, exe) -> None:
        pass

    def encode(self, exe, ctx) -> None:
        args = exe.read_values(ctx, self.reads)
        results = self.kernel(self.node, args)
        if isinstance(results, np.ndarray) or not isinstance(results, (list, tuple)):
            results = [results]
        if len(results) != len(self.writes):
            raise RuntimeError(f"host kernel for {self.node.label} returned {len(results)} value(s), "
                               f"expected {len(self.writes)}")
        values = []
        for value, shape in zip(results, self.node.outputs):
            value = np.asarray(value)
            if value.shape != shape.dims:
                raise RuntimeError(f"host kernel for {self.node.label} returned dims {value.shape}, "
                                   f"expected {shape.dims}")
            values.append(value.astype(shape.dtype.np, copy=False))
        exe.write_values(self.writes, values)

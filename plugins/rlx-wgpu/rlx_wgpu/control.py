"""Host-driven control flow: ``if``, ``while`` and ``scan`` over device-resident data.

Each body is compiled once into its own executable (its own arena) on the same device.
Operands and results move between arenas with buffer copies inside the run's command
stream; only a condition (one element) ever comes back to the host, which ends the
current submit. Every body execution runs under the owner's ``rng.fold_in(i)`` (``i``
the iteration, 0 for ``if``), as the ops define.
"""
from __future__ import annotations

from rlx_core.ir import Node, Ref
from rlx_core.ir.shape import Shape

from .layout import exact_nbytes, from_device

__all__ = ["IfStep", "WhileStep", "ScanStep", "CONTROL_KINDS"]


class _ControlStep:
    host_writes = False

    def __init__(self, index: int, node: Node, exe):
        self.index = index
        self.node = node
        self.label = node.label
        self.reads = list(node.inputs)
        self.writes = [Ref(node.id, i) for i in range(len(node.outputs))]

    def items(self):
        return []

    def bind(self, exe) -> None:
        pass

    @staticmethod
    def _run(exe, body, ctx, iteration: int, sources) -> None:
        """Copy ``sources`` ((buffer, offset) per body input) in, and encode ``body``
        under ``exe.rng.fold_in(iteration)``."""
        body.rng = exe.rng.fold_in(iteration)
        for (buffer, offset), (dst, nbytes) in zip(sources, body.input_regions()):
            ctx.copy(buffer, offset, body.arena, dst, nbytes)
        body.encode(ctx)

    @staticmethod
    def _truth(ctx, buffer, region, shape: Shape) -> bool:
        """The single-element condition at ``region`` of ``buffer``, once computed."""
        offset, nbytes = region
        return bool(from_device(ctx.read(buffer, offset, nbytes), shape).reshape(()))


class IfStep(_ControlStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.branches = (exe.child(node.attrs["then_branch"]), exe.child(node.attrs["else_branch"]))

    def encode(self, exe, ctx) -> None:
        cond = self.node.inputs[0]
        flag = self._truth(ctx, exe.arena, exe.region(cond), exe.graph.shape_of(cond))
        body = self.branches[0] if flag else self.branches[1]
        self._run(exe, body, ctx, 0, [(exe.arena, exe.region(r)[0]) for r in self.node.inputs[1:]])
        for (src, nbytes), ref in zip(body.output_regions(), self.writes):
            ctx.copy(body.arena, src, exe.arena, exe.region(ref)[0], nbytes)


class _CarryingStep(_ControlStep):
    """A loop whose first ``carried`` operands start its state (the node's first outputs)."""

    carried = 0

    def bind(self, exe) -> None:
        self._init = [exe.copy_dispatch(src, dst) for src, dst in zip(self.node.inputs[:self.carried], self.writes)]

    def start(self, ctx) -> None:
        for dispatch in self._init:
            ctx.dispatch(*dispatch)


class WhileStep(_CarryingStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.cond, self.body = exe.child(node.attrs["cond"]), exe.child(node.attrs["body"])
        self.carried = len(node.inputs)

    def encode(self, exe, ctx) -> None:
        state = [exe.region(r) for r in self.writes]
        self.start(ctx)
        sources = [(exe.arena, offset) for offset, _ in state]
        limit, i = self.node.attrs["max_iterations"], 0
        while limit is None or i < limit:
            self._run(exe, self.cond, ctx, i, sources)
            if not self._truth(ctx, self.cond.arena, self.cond.output_regions()[0], self.cond.graph.output_shapes[0]):
                break
            self._run(exe, self.body, ctx, i, sources)
            for (src, nbytes), (dst, _) in zip(self.body.output_regions(), state):
                ctx.copy(self.body.arena, src, exe.arena, dst, nbytes)
            i += 1


class ScanStep(_CarryingStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.body = exe.child(node.attrs["body"])
        nc = self.carried = node.attrs["num_carry"]
        xs = [exe.graph.shape_of(r) for r in node.inputs[nc:]]
        self.x_step = [exact_nbytes(Shape(x.dims[1:], x.dtype)) for x in xs]
        self.y_step = [exact_nbytes(Shape(y.dims[1:], y.dtype)) for y in node.outputs[nc:]]
        self.length = xs[0].dims[0]

    def encode(self, exe, ctx) -> None:
        nc, reverse = self.node.attrs["num_carry"], self.node.attrs["reverse"]
        carry = [exe.region(r) for r in self.writes[:nc]]
        xs = [exe.region(r)[0] for r in self.node.inputs[nc:]]
        ys = [exe.region(r)[0] for r in self.writes[nc:]]
        self.start(ctx)
        order = range(self.length - 1, -1, -1) if reverse else range(self.length)
        for i, t in enumerate(order):
            sources = [(exe.arena, offset) for offset, _ in carry] + \
                      [(exe.arena, x + t * step) for x, step in zip(xs, self.x_step)]
            self._run(exe, self.body, ctx, i, sources)
            outs = self.body.output_regions()
            for (src, nbytes), (dst, _) in zip(outs[:nc], carry):
                ctx.copy(self.body.arena, src, exe.arena, dst, nbytes)
            for (src, _), y, step in zip(outs[nc:], ys, self.y_step):
                ctx.copy(self.body.arena, src, exe.arena, y + t * step, step)


CONTROL_KINDS = {"if": IfStep, "while": WhileStep, "scan": ScanStep}

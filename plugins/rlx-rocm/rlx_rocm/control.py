"""Host-driven control flow: ``if``, ``while`` and ``scan`` over device-resident data.

Each body is compiled once into its own executable (its own arena) on the same device
and queue. Operands and results move between arenas with device buffer copies enqueued
in order with the kernels; only a condition (one element) is read back to the host,
which waits for the queue. Every body execution runs under the owner's
``rng.fold_in(i)`` (``i`` the iteration, 0 for ``if``), as the ops define.
"""
from __future__ import annotations

from rlx_core.ir import Node, Ref

__all__ = ["IfStep", "WhileStep", "ScanStep", "CONTROL_KINDS"]


class _ControlStep:
    dispatches = ()
    scratch_sizes = ()

    def __init__(self, index: int, node: Node, exe):
        self.index = index
        self.node = node
        self.nodes = (node,)
        self.label = node.label
        self.reads = list(node.inputs)
        self.writes = [Ref(node.id, i) for i in range(len(node.outputs))]

    def bind(self, exe) -> None:
        pass

    @staticmethod
    def _run(exe, body, iteration: int, sources) -> None:
        """Copy ``sources`` ((executable, slot, byte offset) per body input) into the body's
        inputs and enqueue the body under ``exe.rng.fold_in(iteration)``."""
        body.rng = exe.rng.fold_in(iteration)
        for (src_exe, slot, extra), node in zip(sources, body.graph.input_nodes):
            body.copy(src_exe, slot, Ref(node.id), src_extra=extra)
        body.enqueue()

    @staticmethod
    def _truth(exe, ref: Ref) -> bool:
        return bool(exe.read_now(ref, exe.graph.shape_of(ref)).reshape(()))


class IfStep(_ControlStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.branches = (exe.child(node.attrs["then_branch"]), exe.child(node.attrs["else_branch"]))

    def enqueue(self, exe) -> None:
        body = self.branches[0] if self._truth(exe, self.node.inputs[0]) else self.branches[1]
        self._run(exe, body, 0, [(exe, r, 0) for r in self.node.inputs[1:]])
        for src, ref in zip(body.graph.outputs, self.writes):
            exe.copy(body, src, ref)


class WhileStep(_ControlStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.cond, self.body = exe.child(node.attrs["cond"]), exe.child(node.attrs["body"])

    def enqueue(self, exe) -> None:
        for src, dst in zip(self.node.inputs, self.writes):
            exe.copy(exe, src, dst)
        state = [(exe, r, 0) for r in self.writes]
        limit, i = self.node.attrs["max_iterations"], 0
        while limit is None or i < limit:
            self._run(exe, self.cond, i, state)
            if not self._truth(self.cond, self.cond.graph.outputs[0]):
                break
            self._run(exe, self.body, i, state)
            for src, dst in zip(self.body.graph.outputs, self.writes):
                exe.copy(self.body, src, dst)
            i += 1


class ScanStep(_ControlStep):
    def __init__(self, index, node, exe):
        super().__init__(index, node, exe)
        self.body = exe.child(node.attrs["body"])
        nc = self.num_carry = node.attrs["num_carry"]
        xs = [exe.graph.shape_of(r) for r in node.inputs[nc:]]
        self.x_step = [x.nbytes // x.dims[0] if x.dims[0] else 0 for x in xs]
        self.y_step = [y.nbytes // y.dims[0] if y.dims[0] else 0 for y in node.outputs[nc:]]
        self.length = xs[0].dims[0]

    def enqueue(self, exe) -> None:
        nc, reverse = self.num_carry, self.node.attrs["reverse"]
        carry, ys = self.writes[:nc], self.writes[nc:]
        for src, dst in zip(self.node.inputs[:nc], carry):
            exe.copy(exe, src, dst)
        order = range(self.length - 1, -1, -1) if reverse else range(self.length)
        for i, t in enumerate(order):
            sources = [(exe, r, 0) for r in carry] + \
                      [(exe, r, t * step) for r, step in zip(self.node.inputs[nc:], self.x_step)]
            self._run(exe, self.body, i, sources)
            outs = self.body.graph.outputs
            for src, dst in zip(outs[:nc], carry):
                exe.copy(self.body, src, dst)
            for src, dst, step in zip(outs[nc:], ys, self.y_step):
                exe.copy(self.body, src, dst, dst_extra=t * step)


CONTROL_KINDS = {"if": IfStep, "while": WhileStep, "scan": ScanStep}

"""Control flow (``if``, ``while``, ``scan``): the GPU loops by itself where it can.

Each control-flow node of an executable is a :class:`ControlFlow` running in one of two
modes, chosen at compile time (``mode``; ``reason`` says why a node runs on the host):

* ``device``: CUDA graph conditional nodes (``rlx_cuda.graphs``, a 12.4+ driver). An
  ``if`` is two IF nodes (then / else) set by one control kernel; a ``while`` is a
  WHILE node whose body ends with a control kernel that advances the counter, reads
  the next predicate and sets the node's handle. A ``scan`` (static trip count) whose
  steps fit in ``UNROLLED_LAUNCHES`` launches is unrolled into the graph: each step is
  one copy launch plus its body, with no WHILE node (each of whose iterations costs
  about 10 us on an H200) and no counter; a longer scan is a WHILE node. The
  executable's whole run is then one graph launch: no host round trip per iteration.
  A run outside such a graph (a traced run, or next to host-mode nodes) launches the
  node's own graph.
* ``host``: the host drives the loop, cheaply: each iteration is one replay of a
  captured graph (copies in, the body, copies out, the next predicate) and the
  predicate comes back through pinned memory after an event, instead of a device sync
  and a pageable read. A scan (static trip count) never waits. Exact for every graph.

Device mode needs: a driver and toolchain with conditional nodes, CUDA graphs enabled
(``graph_capture``) and bodies whose every step is capturable. A body drawing random
numbers runs its i-th time under ``rng.fold_in(i)``: an unrolled scan fixes step t's
seeds as it is captured, while a WHILE node's single captured body cannot follow ``i``,
so such loops run on the host, and so does an ``if`` drawing random numbers (its
branches would capture ``fold_in(0)`` alike, but that path has not yet run on a GPU).
The backend option ``control_flow="host"`` forces the host mode.

State: the carried values live in the node's outputs (the parent's arena); values move
between them, the operands and the bodies' inputs and outputs with one batched copy
launch per hand-over (``graphs.CopyTable``); a scan slices ``xs[t]`` / ``ys[t]`` by a
device counter, so every iteration is the same graph.
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Callable, Sequence

import numpy as np
from rlx_core.ir import Graph, Ref

from . import graphs
from .graphs import IF, WHILE, Chain, CopyTable

__all__ = ["ControlFlow", "CONTROL_KINDS", "control_flow", "executable_items", "emit_items"]

log = logging.getLogger("rlx.cuda")

CONTROL_KINDS = frozenset({"if", "while", "scan"})
_RNG_KINDS = frozenset({"rng_uniform", "rng_normal"})
_D2H = 2
UNROLLED_LAUNCHES = 1024  # the most launches an unrolled scan may add to a graph


def control_flow(exe, node) -> "ControlFlow":
    return {"if": IfFlow, "while": WhileFlow, "scan": ScanFlow}[node.kind](exe, node)


def executable_items(exe) -> list:
    """``exe``'s work in order: each step's bound callables, or its :class:`ControlFlow`."""
    items: list = []
    for i, (_, _, actions) in enumerate(exe._bound):
        ctl = exe._control.get(i)
        items.extend([ctl] if ctl is not None else actions)
    return items


def emit_items(chain: Chain, items: Sequence) -> None:
    """Queue ``items`` into a conditional graph: work is captured, control flow nests."""
    for item in items:
        if isinstance(item, ControlFlow):
            item.emit(chain)
        else:
            chain.work(item)


def _launches(items: Sequence) -> int:
    """About how many graph nodes ``items`` add to a conditional graph."""
    return sum(item.launches if isinstance(item, ControlFlow) else 1 for item in items)


def _draws_random(graph: Graph) -> bool:
    for node in graph.nodes:
        if node.kind in _RNG_KINDS:
            return True
        if any(isinstance(v, Graph) and _draws_random(v) for v in node.attrs.values()):
            return True
    return False


def _used_inputs(sub) -> list[bool]:
    """Which inputs of sub-executable ``sub`` anything reads (the others need no copy)."""
    root = sub.plan.root
    read = {root(r) for r in sub.graph.outputs}
    for step in sub.steps:
        read.update(root(r) for r in step.reads)
        for action in step.actions:
            for buf in _bufs(action):
                if buf.ref is not None:
                    read.add(root(buf.ref))
            node = getattr(action, "node", None)
            if node is not None:
                read.update(root(r) for r in node.inputs)
    return [root(Ref(n.id)) in read for n in sub.graph.input_nodes]


def _capturable(sub) -> bool:
    """Whether every step of ``sub`` is device work (nested control flow is not: it may sync)."""
    return all(cap and i not in sub._control for i, (_, cap, _) in enumerate(sub._bound))


def _bufs(action) -> list:
    from .steps import Buf
    values = list(getattr(action, "args", ())) + [getattr(action, k, None) for k in ("a", "b", "c", "src", "dst")]
    return [v for v in values if isinstance(v, Buf)]


def _ptr(arr) -> int:
    return int(arr.data.ptr)


def _disjoint(pairs: Sequence[tuple[Any, Any]]) -> bool:
    """Whether no destination of the ``(dst, src)`` array pairs overlaps a source, so that
    one copy launch (blocks in any order) may do them all; a copy onto itself is skipped."""
    moves = [(_ptr(d), d.nbytes, _ptr(s), s.nbytes) for d, s in pairs if _ptr(d) != _ptr(s)]
    return not any(d < s + sn and s < d + dn for d, dn, _, _ in moves for _, _, s, sn in moves)


class _Program:
    """Work run in order on the current stream; replayed from one captured CUDA graph
    after its first (eager) run when every item is capturable device work."""

    def __init__(self, cp, items: Sequence[Callable[[], None]], replay: bool):
        self.cp, self.items = cp, list(items)
        self.replay = replay and not any(isinstance(i, ControlFlow) for i in self.items)
        self._graph = None
        self._ran = False

    def __call__(self) -> None:
        if self._graph is not None:
            self._graph.launch(stream=self.cp.cuda.get_current_stream())
            return
        for item in self.items:
            item()
        if self.replay and not self._ran:
            try:
                self._graph = graphs.capture(self.cp, self.items)
            except Exception as e:  # replay is an optimization: stay eager
                self.replay = False
                log.debug("cuda: control-flow program not captured, running eagerly: %s", e)
        self._ran = True


class ControlFlow(abc.ABC):
    """One control-flow node of ``exe``; called (``run``) when its step runs eagerly."""

    def __init__(self, exe, node):
        self.exe, self.node, self.rt, self.cp = exe, node, exe.rt, exe.cp
        self.label = node.label
        self.inputs = [exe.arrays[r] for r in node.inputs]
        self.outputs = [exe.arrays[Ref(node.id, i)] for i in range(len(node.outputs))]
        self.subs = {role: exe.subgraph(g) for role, g in self.bodies().items()}
        self.random = any(_draws_random(s.graph) for s in self.subs.values())
        # host-mode programs replay as one graph when no body step runs on the host
        self.replayable = not self.random and all(_capturable(s) for s in self.subs.values())
        with self.rt.device:
            self._counter = self.rt.alloc(64)  # int64 iteration counter
            self._pinned = self.cp.cuda.alloc_pinned_memory(64)
            self._event = self.cp.cuda.Event(block=False, disable_timing=True)
        self._flag = np.frombuffer(self._pinned, np.uint8, 1)
        self.host = graphs.control_kernels(self.rt)
        self.device_kernels = None
        self.reason = self._why_host()
        self._graph = None  # this node's own conditional graph (runs outside a whole-run graph)
        self._runs = 0
        self._programs: dict[str, _Program] = {}

    # --- what subclasses define ---------------------------------------------------------
    @abc.abstractmethod
    def bodies(self) -> dict[str, Graph]:
        """The node's body graphs by attribute name."""

    @abc.abstractmethod
    def emit(self, chain: Chain) -> None:
        """Add this node to a conditional graph (device mode)."""

    @abc.abstractmethod
    def run_host(self) -> None:
        """Run the node driven from the host (host mode)."""

    #: whether emit fixes each body run's random seeds at capture (see the module docstring)
    seeds_at_capture = False

    @property
    def launches(self) -> int:
        """About how many graph nodes :meth:`emit` adds: control kernels, copies, bodies."""
        return 4 + sum(_launches(self._sub_items(role)) for role in self.subs)

    # --- mode ----------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return "device" if self.reason is None else "host"

    def _why_host(self) -> str | None:
        backend = self.exe.backend
        if backend.get("control_flow", "auto") == "host":
            return "backend option control_flow='host'"
        if not backend.get("graph_capture", True):
            return "backend option graph_capture=False"
        if self.random and not self.seeds_at_capture:
            return "a body draws random numbers (rng.fold_in per iteration)"
        for role, sub in self.subs.items():
            for i, (label, capturable, _) in enumerate(sub._bound):
                ctl = sub._control.get(i)
                if ctl is not None and ctl.reason is not None:
                    return f"nested {ctl.node.kind} '{ctl.label}' runs on the host: {ctl.reason}"
                if ctl is None and not capturable:
                    return f"{role} step '{label}' runs on the host"
        kernels, why = graphs.conditional_kernels(self.rt)
        if kernels is None:
            return f"conditional graph nodes unavailable: {why}"
        self.device_kernels = kernels
        return None

    def fail(self, why: str) -> None:
        """Device mode did not work out: host mode from now on (this node and nested ones)."""
        if self.reason is None:
            self.reason = f"conditional graph failed: {why}"
            log.warning("cuda: %s '%s' runs host-driven: %s", self.node.kind, self.label, self.reason)
        for sub in self.subs.values():
            for ctl in sub._control.values():
                ctl.fail(why)

    def __call__(self) -> None:
        """Run eagerly: the first time host-driven (it compiles and warms everything),
        then through this node's own conditional graph in device mode. A node drawing
        random numbers always runs host-driven here: its executable's seed may change
        from one call to the next (an enclosing host-driven loop folds it per iteration),
        and a graph of its own would hold the seeds of the call that captured it."""
        self._runs += 1
        if self.random:
            self.run_host()
            return
        if self.reason is None and self._graph is None and self._runs > 1:
            try:
                self._graph = graphs.build(self.cp, self.emit)
            except Exception as e:  # never fail a run for it: host mode is exact
                self.fail(f"{type(e).__name__}: {e}")
        if self._graph is not None and self.reason is None:
            self._graph.launch(self.cp.cuda.get_current_stream())
            return
        self.run_host()

    run = __call__

    # --- helpers -------------------------------------------------------------------------
    def _sub_items(self, role: str) -> list:
        return executable_items(self.subs[role])

    def _copies(self, pairs: Sequence[tuple[Any, Any]], steps: Sequence[tuple[int, int]] = ()) -> CopyTable:
        """A copy table of ``(dst, src)`` array pairs; ``steps``: per pair the (dst, src)
        slice strides in bytes of a counter-indexed copy (one copy is the smaller array)."""
        steps = list(steps) or [(0, 0)] * len(pairs)
        return CopyTable(self.cp, [(_ptr(d), _ptr(s), int(min(d.nbytes, s.nbytes)), ds, ss)
                                   for (d, s), (ds, ss) in zip(pairs, steps)])

    def _to_inputs(self, role: str, sources: Sequence[Any]) -> list[tuple[Any, Any]]:
        """(body input, source) pairs for the inputs of body ``role`` that are read."""
        sub = self.subs[role]
        return [(view, src) for view, src, used in zip(sub._inputs.values(), sources, _used_inputs(sub)) if used]

    def _set_rng(self, role: str, iteration: int | Callable[[], int]) -> Callable[[], None]:
        """Sets body ``role``'s seed for run ``iteration`` when called (read then, so at
        capture it follows the executable's seed of that capture)."""
        sub = self.subs[role]
        return lambda: sub.set_rng(self.exe.rng.fold_in(iteration() if callable(iteration) else iteration))

    def _rng(self, role: str, iteration: int | Callable[[], int]) -> list[Callable[[], None]]:
        """The items setting body ``role``'s seed for run ``iteration``; none without random numbers."""
        return [self._set_rng(role, iteration)] if self.random else []

    def _program(self, key: str, make: Callable[[], list]) -> _Program:
        """The host-mode program ``key`` (its items made once by ``make``)."""
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = _Program(self.cp, make(), self.replayable)
        return program

    def _flag_copy(self, src_ptr: int) -> Callable[[], None]:
        def copy():
            self.cp.cuda.runtime.memcpyAsync(self._flag.ctypes.data, src_ptr, 1, _D2H,
                                             self.cp.cuda.get_current_stream().ptr)
        return copy

    def _read_flag(self) -> bool:
        self._event.record(self.cp.cuda.get_current_stream())
        self._event.synchronize()
        return bool(self._flag[0])

    def _memset_counter(self) -> None:
        self.rt.memset(self._counter.ptr, 0, 8, self.cp.cuda.get_current_stream())


class IfFlow(ControlFlow):
    def bodies(self) -> dict[str, Graph]:
        return {"then": self.node.attrs["then_branch"], "else": self.node.attrs["else_branch"]}

    def __init__(self, exe, node):
        super().__init__(exe, node)
        operands = self.inputs[1:]
        self._in = {role: self._copies(self._to_inputs(role, operands)) for role in self.subs}
        self._out = {role: self._copies(list(zip(self.outputs, sub._outputs))) for role, sub in self.subs.items()}

    def _branch_items(self, role: str, kernels) -> list:
        return self._rng(role, 0) + [lambda: kernels.copy(self._in[role])] + self._sub_items(role) + \
            [lambda: kernels.copy(self._out[role])]

    def emit(self, chain: Chain) -> None:
        k = self.device_kernels
        then_h, else_h = chain.handle(), chain.handle()
        cond = _ptr(self.inputs[0])
        chain.work(lambda: k.control(then_h=then_h, else_h=else_h, set_mask=3, cond=cond))
        for role, body in zip(("then", "else"), chain.branch([(then_h, IF), (else_h, IF)])):
            inner = chain.body(body)
            emit_items(inner, self._branch_items(role, k))
            inner.close()

    def run_host(self) -> None:
        self._flag_copy(_ptr(self.inputs[0]))()
        role = "then" if self._read_flag() else "else"
        self._program(role, lambda: self._branch_items(role, self.host))()


class WhileFlow(ControlFlow):
    """State = the node's outputs. Before the loop: operands -> state (and -> the cond's
    inputs), cond, predicate. Each iteration: state -> body inputs, body, body outputs ->
    state and -> cond inputs, cond, predicate (and the counter against max_iterations)."""

    def bodies(self) -> dict[str, Graph]:
        return {"cond": self.node.attrs["cond"], "body": self.node.attrs["body"]}

    def __init__(self, exe, node):
        super().__init__(exe, node)
        self.limit = node.attrs["max_iterations"]
        cond_in = self._to_inputs("cond", self.inputs)
        self._init = self._copies(list(zip(self.outputs, self.inputs)) + cond_in)
        self._into_body = self._copies(self._to_inputs("body", self.outputs))
        body_out = self.subs["body"]._outputs
        self._out_of_body = self._copies(list(zip(self.outputs, body_out)) + self._to_inputs("cond", body_out))
        self._cond_ptr = _ptr(self.subs["cond"]._outputs[0])
        self._i = 0

    def emit(self, chain: Chain) -> None:
        k, counter, limit = self.device_kernels, self._counter.ptr, -1 if self.limit is None else self.limit
        handle = chain.handle()
        chain.work(lambda: k.copy(self._init))
        chain.work(self._memset_counter)
        emit_items(chain, self._sub_items("cond"))
        chain.work(lambda: k.control(then_h=handle, set_mask=1, counter=counter, limit=limit, cond=self._cond_ptr))
        (body,) = chain.branch([(handle, WHILE)])
        inner = chain.body(body)
        emit_items(inner, [lambda: k.copy(self._into_body)] + self._sub_items("body") +
                   [lambda: k.copy(self._out_of_body)] + self._sub_items("cond"))
        inner.work(lambda: k.control(then_h=handle, set_mask=1, counter=counter, step=1, limit=limit,
                                     cond=self._cond_ptr))
        inner.close()

    def _host_programs(self) -> tuple[_Program, _Program]:
        h, flag, rng = self.host, self._flag_copy(self._cond_ptr), self._rng
        # iteration i: the body under fold_in(i), then the cond of check i + 1
        first = self._program("first", lambda: rng("cond", 0) + [lambda: h.copy(self._init)] +
                              self._sub_items("cond") + [flag])
        step = self._program("step", lambda: rng("body", lambda: self._i) + [lambda: h.copy(self._into_body)] +
                             self._sub_items("body") + [lambda: h.copy(self._out_of_body)] +
                             rng("cond", lambda: self._i + 1) + self._sub_items("cond") + [flag])
        return first, step

    def run_host(self) -> None:
        first, step = self._host_programs()
        first()
        self._i = 0
        while (self.limit is None or self._i < self.limit) and self._read_flag():
            step()
            self._i += 1


class ScanFlow(ControlFlow):
    """Carry = the node's first outputs, ys = the rest; step t reads xs[t] and writes ys[t]
    (t counted down when ``reverse``).

    Unrolled (device mode, :attr:`unrolled`): before each step one copy launch moves the
    last step's outputs to ys and the carry (the operands first) and xs[t] to the body
    inputs; after the last step it moves the carry out. As a WHILE node (longer scans)
    or host-driven, each iteration is: carry and xs[counter] -> body inputs, body, body
    outputs -> carry and ys[counter], counter + 1."""

    def bodies(self) -> dict[str, Graph]:
        return {"body": self.node.attrs["body"]}

    def __init__(self, exe, node):
        self.num_carry, self.reverse = node.attrs["num_carry"], bool(node.attrs["reverse"])
        self.length = int(exe.arrays[node.inputs[self.num_carry]].shape[0])  # unrolled needs it
        super().__init__(exe, node)
        nc, n = self.num_carry, self.length
        carry, ys, xs = self.outputs[:nc], self.outputs[nc:], self.inputs[nc:]
        sub = self.subs["body"]
        views, used = self._body_inputs = list(sub._inputs.values()), _used_inputs(sub)
        self._init = self._copies(list(zip(carry, self.inputs[:nc])))
        into = [((v, c), (0, 0)) for v, c, u in zip(views[:nc], carry, used[:nc]) if u]
        into += [((v, x), (0, x.nbytes // max(n, 1))) for v, x, u in zip(views[nc:], xs, used[nc:]) if u]
        out = [((c, o), (0, 0)) for c, o in zip(carry, sub._outputs[:nc])]
        out += [((y, o), (y.nbytes // max(n, 1), 0)) for y, o in zip(ys, sub._outputs[nc:])]
        self._into = self._copies([p for p, _ in into], [s for _, s in into])
        self._out = self._copies([p for p, _ in out], [s for _, s in out])
        self._handovers: list[list[CopyTable]] | None = None
        self._i = 0

    @property
    def unrolled(self) -> bool:
        """Whether device mode unrolls the steps: when they fit in ``UNROLLED_LAUNCHES``."""
        return self._unrolled_launches() <= UNROLLED_LAUNCHES

    seeds_at_capture = unrolled  # step t's seeds are fixed as it is captured

    @property
    def launches(self) -> int:
        return self._unrolled_launches() if self.unrolled else super().launches

    def _unrolled_launches(self) -> int:
        return (self.length + 1) * (1 + _launches(self._sub_items("body")))

    def _slot(self, t: int) -> int:
        return self.length - 1 - t if self.reverse else t

    def _handover(self, t: int) -> list[CopyTable]:
        """The copy launches before unrolled step t (t = length: after the last step). One
        launch moves the carry straight from the last step's outputs into the body inputs,
        unless a destination overlaps a source (a body output that is also a body input);
        then the carry goes through the node's outputs in a first launch."""
        nc, n, outs = self.num_carry, self.length, self.subs["body"]._outputs
        views, used = self._body_inputs
        carry, ys, xs = self.outputs[:nc], self.outputs[nc:], self.inputs[nc:]
        state = self.inputs[:nc] if t == 0 else outs[:nc]  # where the carry is now
        out = [] if t == 0 else [(y[self._slot(t - 1)], o) for y, o in zip(ys, outs[nc:])]
        xs_in = [] if t == n else [(v, x[self._slot(t)]) for v, x, u in zip(views[nc:], xs, used[nc:]) if u]
        if t == n:
            return [self._copies(out + list(zip(carry, state)))]
        direct = out + [(v, c) for v, c, u in zip(views[:nc], state, used[:nc]) if u] + xs_in
        if _disjoint(direct):
            return [self._copies(direct)]
        return [self._copies(out + list(zip(carry, state))),
                self._copies([(v, c) for v, c, u in zip(views[:nc], carry, used[:nc]) if u] + xs_in)]

    def _step_items(self, kernels, handle: int | None) -> list:
        counter, n, rev = self._counter.ptr, self.length, self.reverse
        if handle is None:
            advance = lambda: kernels.control(counter=counter, step=1, limit=n)  # noqa: E731
        else:
            advance = lambda: kernels.control(then_h=handle, set_mask=1, counter=counter, step=1, limit=n)  # noqa: E731
        return [lambda: kernels.copy(self._into, counter, n, rev)] + self._sub_items("body") + \
            [lambda: kernels.copy(self._out, counter, n, rev), advance]

    def emit(self, chain: Chain) -> None:
        k = self.device_kernels
        if self.unrolled:
            if self._handovers is None:
                self._handovers = [self._handover(t) for t in range(self.length + 1)]
            for t, tables in enumerate(self._handovers):
                for table in tables:
                    chain.work(lambda table=table: k.copy(table))
                if t < self.length:
                    emit_items(chain, self._rng("body", t) + self._sub_items("body"))
            return
        chain.work(lambda: k.copy(self._init))
        if not self.length:
            return
        handle, counter, n = chain.handle(), self._counter.ptr, self.length
        chain.work(self._memset_counter)
        chain.work(lambda: k.control(then_h=handle, set_mask=1, counter=counter, limit=n))
        (body,) = chain.branch([(handle, WHILE)])
        inner = chain.body(body)
        emit_items(inner, self._step_items(k, handle))
        inner.close()

    def run_host(self) -> None:
        h = self.host
        self._program("first", lambda: [lambda: h.copy(self._init), self._memset_counter])()
        step = self._program("step", lambda: self._rng("body", lambda: self._i) + self._step_items(h, None))
        for self._i in range(self.length):
            step()

"""Control flow: ``if``, ``while`` and ``scan``, whose bodies are subgraphs held in
graph attributes.

A subgraph sees only its own inputs -- there is no implicit capture of outer values:
pass what a body needs as operands (for ``while`` and ``scan``, as carried values it
returns unchanged). Subgraph inputs are bound by position (the order of their
``input`` nodes) and must match the operands' dims and dtypes exactly; subgraphs
have no params.

Random numbers: each execution of a subgraph runs under ``RngOptions.fold_in(i)``
(``i`` = the iteration, counted from 0; 0 for ``if``), so rng nodes in a loop body
draw new numbers on every iteration while a run remains a function of its options.
Backends that run control flow natively must do the same.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ...errors import GraphError, OpAttributeError, ShapeError
from ..dtypes import DType
from ..node import Value
from ..schema import Attr, op
from ..shape import Shape

BOOL = frozenset({DType.BOOL})


def _fmt(shapes: Sequence[Shape]) -> str:
    return "(" + ", ".join(f"{list(s.dims)} {s.dtype}" for s in shapes) + ")"


def _check_subgraph(what: str, graph, operands: Sequence[Shape]) -> tuple[Shape, ...]:
    """Check that ``graph`` takes exactly ``operands`` (by position) and has no params;
    return its output shapes. ``what`` names the subgraph in errors ("while body")."""
    if graph.param_nodes:
        raise GraphError(f"{what} '{graph.name}' has params {graph.param_names}; subgraphs take values "
                         f"only through their inputs")
    if not graph.outputs:
        raise GraphError(f"{what} '{graph.name}' has no outputs; call set_outputs")
    declared = tuple(n.outputs[0] for n in graph.input_nodes)
    if declared != tuple(operands):
        raise ShapeError(f"{what} '{graph.name}' takes {len(declared)} input(s) {_fmt(declared)} "
                         f"but is given {len(operands)} {_fmt(operands)}")
    return tuple(graph.output_shapes)


@op("if", inputs=("cond", "*operands"), dtypes=BOOL, multi_output=True, builder="cond",
    attrs={"then_branch": Attr("graph", doc="run when cond is true"),
           "else_branch": Attr("graph", doc="run when cond is false")})
def if_(a, cond, *operands):
    """Run ``then_branch(*operands)`` when the single-element bool ``cond`` is true, else
    ``else_branch(*operands)``; the outputs are the chosen branch's. Both branches take
    the operands (by position, equal dims and dtypes) and return outputs of identical
    dims and dtypes; only the chosen branch runs."""
    if cond.size != 1:
        raise ShapeError(f"if cond must hold exactly one bool, got dims {list(cond.dims)}")
    then_out = _check_subgraph("if then_branch", a.then_branch, operands)
    else_out = _check_subgraph("if else_branch", a.else_branch, operands)
    if then_out != else_out:
        raise ShapeError(f"if branches must return identical shapes: then_branch gives {_fmt(then_out)}, "
                         f"else_branch gives {_fmt(else_out)}")
    return then_out


@op("while", inputs="*carried", multi_output=True, builder="while_loop",
    attrs={"cond": Attr("graph", doc="carried -> single-element bool: keep going?"),
           "body": Attr("graph", doc="carried -> next carried (same dims and dtypes)"),
           "max_iterations": Attr("int", None, "stop after this many iterations", optional=True)})
def while_(a, *carried):
    """``state = carried; while (i < max_iterations) and cond(*state): state = body(*state)``;
    the outputs are the final state. ``cond`` returns one single-element bool; ``body``
    returns values of the carried dims and dtypes. Without ``max_iterations`` the loop
    runs until ``cond`` is false (it may not terminate); with it, the loop also stops,
    silently, after that many iterations (0: the initial values are returned)."""
    if not carried:
        raise ShapeError("while needs at least one carried value")
    if a.max_iterations is not None and a.max_iterations < 0:
        raise OpAttributeError(f"while max_iterations must be >= 0, got {a.max_iterations}")
    cond_out = _check_subgraph("while cond", a.cond, carried)
    if len(cond_out) != 1 or cond_out[0].dtype is not DType.BOOL or cond_out[0].size != 1:
        raise ShapeError(f"while cond must return one single-element bool, got {_fmt(cond_out)}")
    body_out = _check_subgraph("while body", a.body, carried)
    if body_out != tuple(carried):
        raise ShapeError(f"while body must return the carried shapes {_fmt(carried)}, got {_fmt(body_out)}")
    return carried


@op("scan", inputs="*operands", multi_output=True,
    attrs={"body": Attr("graph", doc="(*carry, *x_t) -> (*carry', *y_t)"),
           "num_carry": Attr("int", doc="how many leading operands are carried (the rest are scanned)"),
           "reverse": Attr("bool", False, "scan from the last step to the first")})
def scan(a, *operands):
    """JAX's ``lax.scan``: operands are ``num_carry`` initial carries then the ``xs`` (at
    least one), all of the same length ``T`` along axis 0. For each step ``t``
    (``0..T-1``, or ``T-1..0`` when ``reverse``) the body maps ``(*carry, *[x[t] for x
    in xs])`` to ``(*carry', *y_t)``, carry' with the carries' dims and dtypes.
    Outputs: the final carries, then each ``y`` stacked along a new axis 0 with
    ``ys[t]`` from step ``t`` (also when ``reverse``). ``T = 0``: the body never runs,
    the carries are returned as given and the ys are empty (dims ``[0, *y_t dims]``).
    Rng nodes in the body see ``fold_in(i)`` for the i-th step executed."""
    nc = a.num_carry
    if not 0 <= nc < len(operands):
        raise OpAttributeError(f"scan num_carry must be in [0, {len(operands) - 1}] so that at least one "
                               f"operand is scanned (there are {len(operands)} operands), got {nc}")
    carry, xs = operands[:nc], operands[nc:]
    if any(x.rank == 0 for x in xs) or len({x.dims[0] for x in xs}) != 1:
        raise ShapeError(f"scan xs must have rank >= 1 and one length along axis 0, got {_fmt(xs)}")
    steps = xs[0].dims[0]
    out = _check_subgraph("scan body", a.body, carry + tuple(Shape(x.dims[1:], x.dtype) for x in xs))
    if out[:nc] != tuple(carry):
        raise ShapeError(f"scan body must return the carry shapes {_fmt(carry)} first, got {_fmt(out)}")
    return carry + tuple(Shape((steps,) + y.dims, y.dtype) for y in out[nc:])


def _flat(result) -> tuple[list, bool]:
    """A body's returned value(s) as a list, and whether it was a single bare value."""
    if isinstance(result, (list, tuple)):
        return list(result), False
    return [result], True


class ControlBuilders:
    def cond(self, pred, then_fn, else_fn, operands: Sequence = (), *, name=None):
        """``then_fn(*operands)`` if ``pred`` else ``else_fn(*operands)``. Each fn is a Graph
        or a callable ``(subgraph, *values) -> value(s)``. Returns a Value when both
        callables return a single value, else a tuple of Values."""
        pred = self.as_value(pred, DType.BOOL)
        operands = [self.as_value(v) for v in operands]
        shapes = [v.shape for v in operands]
        then_g, then_single = self._subgraph(f"if@{len(self.nodes)}.then", then_fn, shapes, _flat)
        else_g, else_single = self._subgraph(f"if@{len(self.nodes)}.else", else_fn, shapes, _flat)
        outs = self.add_node("if", (pred, *operands), {"then_branch": then_g, "else_branch": else_g}, name=name)
        return outs[0] if then_single and else_single else outs

    def while_loop(self, cond_fn, body_fn, init, max_iterations: int | None = None, *, name=None):
        """Loop ``body_fn`` while ``cond_fn`` holds (at most ``max_iterations`` times), from
        ``init`` (a value or a sequence). Fns are Graphs or callables ``(subgraph,
        *carried) -> value(s)``. Returns the final values, shaped like ``init``."""
        single = not isinstance(init, (list, tuple))
        carried = [self.as_value(v) for v in ([init] if single else init)]
        shapes = [v.shape for v in carried]
        cond_g, _ = self._subgraph(f"while@{len(self.nodes)}.cond", cond_fn, shapes, _flat)
        body_g, _ = self._subgraph(f"while@{len(self.nodes)}.body", body_fn, shapes, _flat)
        outs = self.add_node("while", carried, {"cond": cond_g, "body": body_g, "max_iterations": max_iterations},
                             name=name)
        return outs[0] if single else outs

    def scan(self, body_fn, init, xs, reverse: bool = False, *, name=None):
        """Scan ``body_fn`` over axis 0 of ``xs`` carrying ``init`` (each a value or a
        sequence). ``body_fn`` is a Graph ``(*carry, *x_t) -> (*carry', *y_t)`` or a
        callable ``(subgraph, *carry, *x_t) -> (carry', ys)`` with ``carry'`` shaped like
        ``init`` and ``ys`` a value, a sequence or None. Returns ``(carry, ys)``: the
        final carry shaped like ``init`` and the stacked ys shaped like the callable's
        (a tuple for a Graph body)."""
        carry_single = not isinstance(init, (list, tuple))
        carry = [self.as_value(v) for v in ([init] if carry_single else init)]
        scanned = [self.as_value(v) for v in (xs if isinstance(xs, (list, tuple)) else [xs])]
        if not scanned or any(x.rank == 0 for x in scanned):
            raise ShapeError(f"scan needs at least one xs of rank >= 1 (scanned along axis 0), "
                             f"got {_fmt([x.shape for x in scanned])}")
        shapes = [v.shape for v in carry] + [Shape(x.dims[1:], x.dtype) for x in scanned]

        def flatten(result):
            if not (isinstance(result, (list, tuple)) and len(result) == 2):
                raise GraphError("a scan body callable must return a pair (carry', ys)")
            new_carry, ys = result
            carry_vals = [new_carry] if carry_single else list(new_carry)
            ys_vals, ys_single = ([], False) if ys is None else _flat(ys)
            return carry_vals + ys_vals, ys_single

        body, ys_single = self._subgraph(f"scan@{len(self.nodes)}.body", body_fn, shapes, flatten)
        outs = self.add_node("scan", carry + scanned, {"body": body, "num_carry": len(carry), "reverse": reverse},
                             name=name)
        final, ys = outs[:len(carry)], outs[len(carry):]
        return (final[0] if carry_single else final), (ys[0] if ys_single else ys)

    def _subgraph(self, role: str, fn: Any, shapes: Sequence[Shape],
                  flatten: Callable[[Any], tuple[list, Any]]):
        """``(graph, meta)`` for a body: a Graph is used as given (meta False); a callable
        is called on a new subgraph ``<this graph's name>/<role>`` with one input per
        shape, and ``flatten`` turns its result into the outputs plus ``meta``."""
        from ..graph import Graph
        if isinstance(fn, Graph):
            return fn, False
        if not callable(fn):
            raise GraphError(f"{role}: expected a Graph or a callable (subgraph, *values) -> value(s), "
                             f"got {type(fn).__name__}")
        sub = Graph(f"{self.name}/{role}")
        inputs = [sub.input(f"in{i}", s) for i, s in enumerate(shapes)]
        try:
            outputs, meta = flatten(fn(sub, *inputs))
            for o in outputs:
                if isinstance(o, Value) and o.graph is not sub:
                    raise GraphError(f"returns a value of graph '{o.graph.name}'; subgraphs see only their "
                                     f"own inputs: pass outer values as operands")
            sub.set_outputs([o if isinstance(o, Value) else sub.as_value(o) for o in outputs])
        except GraphError as e:
            raise type(e)(f"{role} '{sub.name}': {e}") from None
        return sub, meta

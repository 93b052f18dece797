"""Host-driven control flow over compiled graphs: :func:`run_if` and :func:`run_while`.

The ``if`` / ``while`` ops put control flow inside one graph. These helpers drive it
from Python instead, over separately compiled graphs -- e.g. a branch compiled for a
GPU and another for the CPU, or a backend without the ``control_flow`` capability.
They follow the ops' semantics, random numbers included: each branch or iteration
runs under its graph's ``RngOptions.fold_in(i)`` (``i`` the iteration, 0 for
``run_if``), so a body drawing random numbers gives the same values as the same body
inside a ``while`` op; the compiled graphs' own options are restored afterwards.

Values are passed by name (a mapping, as ``CompiledGraph.run`` takes) or by position
(a sequence in ``input_names`` order). Interfaces are checked before anything runs,
and a mismatch raises a :class:`GraphError` naming both sides.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import GraphError, InputError, RlxError
from ..ir.dtypes import DType
from ..ir.shape import Shape
from .session import CompiledGraph, Outputs

__all__ = ["run_if", "run_while"]


def run_if(cond: Any, then_compiled: CompiledGraph, else_compiled: CompiledGraph,
           inputs: "Mapping[str, Any] | Sequence[Any]") -> Outputs:
    """Run ``then_compiled`` if ``cond`` (a bool or a single-element array) is true, else
    ``else_compiled``, on ``inputs``. Both must take the same inputs and return the
    same output shapes, so that the result does not depend on the branch's interface."""
    _same_interface("run_if", ("then", then_compiled), ("else", else_compiled))
    chosen = then_compiled if _truth("run_if cond", cond) else else_compiled
    return _run_folded(chosen, _feeds(chosen, inputs), 0)


def run_while(cond_compiled: CompiledGraph, body_compiled: CompiledGraph,
              inputs: "Mapping[str, Any] | Sequence[Any]", max_iterations: int | None = None) -> Outputs:
    """``state = inputs; while (i < max_iterations) and cond(state): state = body(state)``.

    ``body`` output ``k`` becomes its input ``k`` (so its outputs must have its inputs'
    dims and dtypes); ``cond`` reads the state values named by its inputs (a subset of
    the body's) and returns one single-element bool or number (nonzero: continue).
    Returns the final state, in the body's input order and with its input names.
    """
    if max_iterations is not None and (isinstance(max_iterations, bool) or max_iterations < 0):
        raise RlxError(f"run_while max_iterations must be None or an integer >= 0, got {max_iterations!r}")
    body_in = _input_shapes(body_compiled)
    if list(body_compiled.output_shapes) != list(body_in.values()):
        raise GraphError(f"run_while: body outputs {_fmt(body_compiled.output_shapes)} must match its inputs "
                         f"{_fmt_named(body_in)} one to one, to be fed back")
    cond_in = _input_shapes(cond_compiled)
    mismatched = {n: s for n, s in cond_in.items() if body_in.get(n) != s}
    if mismatched:
        raise GraphError(f"run_while: cond inputs {_fmt_named(mismatched)} are not body inputs of the same "
                         f"shape (body takes {_fmt_named(body_in)})")
    cond_out = cond_compiled.output_shapes
    if len(cond_out) != 1 or cond_out[0].size != 1 or cond_out[0].dtype.is_complex:
        raise GraphError(f"run_while: cond must return one single-element bool or number, got {_fmt(cond_out)}")
    state = _feeds(body_compiled, inputs)
    i = 0
    while max_iterations is None or i < max_iterations:
        flag = _run_folded(cond_compiled, {n: state[n] for n in cond_in}, i)[0]
        if not _truth("run_while cond output", flag):
            break
        state = dict(zip(body_in, _run_folded(body_compiled, state, i)))
        i += 1
    return Outputs(list(state.values()), list(state))


def _run_folded(compiled: CompiledGraph, feeds: dict, iteration: int) -> Outputs:
    """``compiled.run(feeds)`` under ``compiled.rng.fold_in(iteration)``."""
    own = compiled.rng
    compiled.set_rng(own.fold_in(iteration))
    try:
        return compiled.run(feeds)
    finally:
        compiled.set_rng(own)


def _feeds(compiled: CompiledGraph, inputs) -> dict:
    """Inputs by name: a mapping as is, a sequence bound to ``input_names`` in order."""
    if isinstance(inputs, Mapping):
        return dict(inputs)
    values = list(inputs)
    names = compiled.input_names
    if len(values) != len(names):
        raise InputError(f"graph '{compiled.graph.name}' takes {len(names)} input(s) {names}, "
                         f"got {len(values)} positional value(s)")
    return dict(zip(names, values))


def _input_shapes(compiled: CompiledGraph) -> dict[str, Shape]:
    return {n.attrs["name"]: n.outputs[0] for n in compiled.graph.input_nodes}


def _same_interface(what: str, *named: tuple[str, CompiledGraph]) -> None:
    (name_a, a), (name_b, b) = named
    if _input_shapes(a) != _input_shapes(b):
        raise GraphError(f"{what}: {name_a} takes {_fmt_named(_input_shapes(a))} but {name_b} takes "
                         f"{_fmt_named(_input_shapes(b))}")
    if list(a.output_shapes) != list(b.output_shapes):
        raise GraphError(f"{what}: {name_a} returns {_fmt(a.output_shapes)} but {name_b} returns "
                         f"{_fmt(b.output_shapes)}")


def _truth(what: str, flag: Any) -> bool:
    arr = np.asarray(flag)
    if arr.size != 1:
        raise InputError(f"{what} must hold exactly one value, got an array of dims {list(arr.shape)}")
    if arr.dtype.kind == "c":
        raise InputError(f"{what} must be a bool or a real number, got {DType.of(arr.dtype)}")
    return bool(arr.reshape(()))


def _fmt(shapes) -> str:
    return "(" + ", ".join(f"{list(s.dims)} {s.dtype}" for s in shapes) + ")"


def _fmt_named(shapes: Mapping[str, Shape]) -> str:
    return "(" + ", ".join(f"{n}: {list(s.dims)} {s.dtype}" for n, s in shapes.items()) + ")"

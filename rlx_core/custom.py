"""Custom op kinds: declared by users or plugins, with a shape rule and a reference kernel.

    register_custom_op(CustomOp(
        kind="mylib.swish_beta", inputs=("x",), attrs={"beta": Attr("float", 1.0)},
        rule=lambda a, x: x,
        reference=lambda x, *, beta: x / (1 + np.exp(-beta * x)),
        dtypes=FLOATS))

Afterwards ``g.op("mylib.swish_beta", x, beta=2.0)`` builds it and the reference
interpreter runs it. Backends run it only when a plugin gives them a kernel through
the ``rlx_op_kernels`` hook; otherwise legalize rejects it at compile time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from .errors import GraphError
from .ir.dtypes import DType
from .ir.schema import Attr, get_schema, op
from .reference.kernels import KERNELS, kernel

__all__ = ["CustomOp", "register_custom_op"]


@dataclass(frozen=True)
class CustomOp:
    kind: str
    rule: Callable
    reference: Callable
    inputs: tuple[str, ...] = ("x",)
    attrs: dict[str, Attr] = field(default_factory=dict)
    dtypes: Iterable[DType] | None = None
    doc: str = ""
    reference_needs_context: bool = False


def register_custom_op(decl: CustomOp) -> None:
    """Declare ``decl.kind``. Re-registering the identical declaration is a no-op; a
    different one under a built-in or taken name is an error."""
    try:
        existing = get_schema(decl.kind)
    except GraphError:
        existing = None
    if existing is not None:
        if existing.custom and existing.rule is decl.rule and KERNELS[decl.kind].fn is decl.reference:
            return
        raise GraphError(f"op kind '{decl.kind}' is already declared"
                         + ("" if existing.custom else " (it is a built-in kind)"))
    rule = decl.rule
    if decl.doc and not rule.__doc__:
        try:
            rule.__doc__ = decl.doc
        except AttributeError:
            pass
    op(decl.kind, inputs=decl.inputs, attrs=decl.attrs, dtypes=decl.dtypes, group="custom",
       custom=True)(rule)
    kernel(decl.kind, context=decl.reference_needs_context)(decl.reference)

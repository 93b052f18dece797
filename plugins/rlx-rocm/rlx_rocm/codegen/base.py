"""What a kernel generator works with: the node, the device, scratch memory, and the
dispatches it adds (OpenCL C source, arguments, NDRange).

A dispatch's arguments are arena slots -- a graph value (``Ref``) or a step's scratch
region (``Scratch``) -- scalars (numpy scalars, passed by value) or ``SeedArg`` (the
per-run Philox key of an rng node, set when the run's rng options change). An arena slot
reaches the kernel as two arguments, the arena buffer and the slot's byte offset in it
(``ulong``); the kernel's prologue rebuilds the typed pointer. No OpenCL sub-buffers:
NVIDIA's OpenCL segfaulted freeing executables whose kernels were bound to sub-buffers of
different sizes at one offset, and drivers differ in how they align, track and release them. Every kernel
is named after the hash of its source, so equal kernels of different steps (equal shapes
and attributes) share one compiled function; each step still gets its own ``cl.Kernel``
object with its arguments bound once.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from rlx_core.ir import DType, Graph, Node, Ref, Shape

from .types import cstore, needs_fp64

__all__ = ["Scratch", "SeedArg", "Dispatch", "KernelContext", "unravel", "strides_of", "idx_type", "groups",
           "linear_loop", "slot_params"]

_GLOBAL_PTR = re.compile(r"__global\s+(const\s+)?([A-Za-z_][\w ]*?)\s*\*\s*([A-Za-z_]\w*)")


@dataclass(frozen=True)
class Scratch:
    node: int   # the step's root node
    index: int  # which scratch region of that step


@dataclass(frozen=True)
class SeedArg:
    node: int   # the rng node whose stream key this is
    word: int   # 0: low 32 bits, 1: high 32 bits


@dataclass
class Dispatch:
    name: str
    source: str
    args: list            # Ref | Scratch | SeedArg | numpy scalar
    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    helpers: tuple[str, ...] = ()


def idx_type(*sizes: int) -> str:
    """``int`` when every index fits in 31 bits, else ``long``."""
    return "int" if max(sizes, default=0) < 2**31 - 1 else "long"


def strides_of(dims) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return list(reversed(out))


def unravel(var: str, dims, idx: str = "int") -> list[str]:
    """C expressions of the coordinates of row-major linear index ``var`` (< the element
    count) in ``dims``."""
    strides = strides_of(dims)
    coords, leading = [], True
    for d, s in zip(dims, strides):
        if d == 1:
            coords.append("0")
            continue
        e = var if s == 1 else f"({var} / {s})"
        if not leading:
            e = f"({e} % {d})"
        leading = False
        coords.append(e)
    return coords


def _prod(dims) -> int:
    return math.prod(dims)


def groups(n: int, wg: int, cap: int = 0) -> int:
    """Global size of a flat launch over ``n`` items in work-groups of ``wg`` (0 when empty).
    ``cap`` is ignored: one work-item per item, the launch shape every OpenCL driver
    handles best (PoCL vectorizes across work-items; a grid-stride loop defeats it)."""
    if n <= 0:
        return 0
    return -(-n // wg) * wg


def linear_loop(var: str, n: int, idx: str, body: str) -> str:
    """The body of a flat launch: work-item ``var`` < ``n`` runs ``body``."""
    return f"  const {idx} {var} = ({idx})get_global_id(0);\n  if ({var} < ({idx}){n}) {{\n{body}\n  }}"


@dataclass
class KernelContext:
    graph: Graph
    node: Node
    dev: Any  # rlx_rocm.opencl.ClDevice
    options: dict = field(default_factory=dict)
    dispatches: list = field(default_factory=list)
    scratch_sizes: list = field(default_factory=list)

    # --- shapes ---------------------------------------------------------------------------
    def shape(self, ref: Ref) -> Shape:
        return self.graph.shape_of(ref)

    @property
    def inputs(self) -> list[Shape]:
        return [self.graph.shape_of(r) for r in self.node.inputs]

    @property
    def out(self) -> Shape:
        return self.node.outputs[0]

    @property
    def fp64(self) -> bool:
        return bool(self.dev.fp64)

    @property
    def wg(self) -> int:
        return self.dev.workgroup

    def max_groups(self) -> int:
        return max(1, self.dev.compute_units) * 64

    # --- memory ---------------------------------------------------------------------------
    def scratch(self, nbytes: int) -> Scratch:
        self.scratch_sizes.append(int(nbytes))
        return Scratch(self.node.id, len(self.scratch_sizes) - 1)

    # --- kernels --------------------------------------------------------------------------
    def kernel(self, params: list[tuple[str, Any]], body: str, gsize, lsize=None, helpers=(), attrs: str = "",
               dtypes=()) -> Dispatch | None:
        """Add a dispatch running ``body`` over ``gsize`` work-items (skipped when empty).

        ``params``: ``(C declaration, argument)`` pairs in order. ``dtypes`` used by the
        kernel are checked for fp64 support here (the claim table already keeps them out
        on devices without it)."""
        gsize = tuple(int(g) for g in (gsize if isinstance(gsize, (tuple, list)) else (gsize,)))
        if any(g == 0 for g in gsize):
            return None
        lsize = None if lsize is None else tuple(int(s) for s in (lsize if isinstance(lsize, (tuple, list))
                                                                  else (lsize,)))
        if lsize is not None:
            gsize = tuple(-(-g // l) * l for g, l in zip(gsize, lsize))
        decl, prologue = slot_params(params)
        text = f"{attrs}void KNAME({decl}) {{\n{prologue}{body}\n}}\n"
        name = "k" + hashlib.sha1(("\n".join(helpers) + text).encode()).hexdigest()[:16]
        source = "__kernel " + text.replace("KNAME", name)
        d = Dispatch(name, source, [a for _, a in params], gsize, lsize, tuple(helpers))
        self.dispatches.append(d)
        return d

    @staticmethod
    def buf(name: str, dt: DType, const: bool = False) -> str:
        return f"__global {'const ' if const else ''}{cstore(dt)}* {name}"

    def uses_fp64(self) -> bool:
        return any(needs_fp64(s.dtype) for s in self.inputs + list(self.node.outputs))


def slot_params(params: list[tuple[str, Any]]) -> tuple[str, str]:
    """The parameter list and prologue of a kernel: every ``__global T* name`` bound to an
    arena slot becomes ``__global T* name__b, const ulong name__o`` (the arena and the
    slot's byte offset), and the prologue defines ``name`` as the slot's typed pointer."""
    decls, lines = [], []
    for decl, arg in params:
        if not isinstance(arg, (Ref, Scratch)):
            decls.append(decl)
            continue
        m = _GLOBAL_PTR.fullmatch(decl.strip())
        if m is None:
            raise ValueError(f"kernel parameter {decl!r} is bound to an arena slot but is not '__global T* name'")
        const, ctype_, name = m.group(1) or "", m.group(2).strip(), m.group(3)
        decls.append(f"__global {const}{ctype_}* {name}__b, const ulong {name}__o")
        lines.append(f"  __global {const}{ctype_}* {name} = (__global {const}{ctype_}*)"
                     f"((__global {const}uchar*){name}__b + {name}__o);\n")
    return ", ".join(decls), "".join(lines)

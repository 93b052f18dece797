"""The optimisation pipeline every backend's graphs go through before compiling.

``optimize(graph, passes)`` runs the passes named in ``PASSES`` in ``ORDER``: clean-up
(constant folding, common-subexpression and dead-code elimination), transposes and
reshapes merged, the patterns exporters write recognised as the fused ops builder
graphs use (GELU, LayerNorm/RMSNorm, attention), BatchNorm folded into its conv or
matmul, then clean-up again. Each pass keeps the graph's inputs, params and outputs
(names, dims, dtypes) and its meaning; the report says what each one changed
(``CompiledGraph.explain()``, ``rlx run --explain``). Control-flow bodies (``if``,
``while``, ``scan`` subgraphs) are compiled as given: the passes read the top level.

Which passes run: ``CompileOptions(passes=...)``, else ``RLX_PASSES``, else all.
A value is ``all``, ``none`` (also ``off``, ``0``), or comma-separated pass names
(those only) or ``-name`` entries (all but those).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import RlxError
from ..ir.graph import Graph
from .cleanup import eliminate_common, eliminate_dead, fold_constants
from .fold_affine import fold_affine
from .fold_movement import fold_movement
from .fuse_attention import fuse_attention
from .fuse_gelu import fuse_gelu
from .fuse_norm import fuse_norms

__all__ = ["optimize", "PASSES", "ORDER", "PassReport", "PassChange", "PassOptionError", "enabled_passes"]

Pass = Callable[[Graph], "tuple[Graph, list[str]]"]

PASSES: dict[str, Pass] = {
    "fold_constants": fold_constants,
    "cse": eliminate_common,
    "dce": eliminate_dead,
    "fold_movement": fold_movement,
    "fuse_gelu": fuse_gelu,
    "fuse_norms": fuse_norms,
    "fuse_attention": fuse_attention,
    "fold_batch_norm": fold_affine,
}
_CLEANUP = ("fold_constants", "cse", "dce")
ORDER: tuple[str, ...] = _CLEANUP + ("fold_movement", "fuse_gelu", "fuse_norms", "fuse_attention",
                                     "fold_batch_norm", "fold_movement") + _CLEANUP
_OFF = ("none", "off", "0", "false", "no")


class PassOptionError(RlxError, ValueError):
    """``CompileOptions(passes=...)`` / ``RLX_PASSES`` names something that is not a pass."""


def enabled_passes(spec: "str | Sequence[str] | None" = None) -> frozenset[str]:
    """The passes ``spec`` turns on (see the module docstring); None reads ``RLX_PASSES``."""
    where = "CompileOptions(passes=...)"
    if spec is None:
        spec, where = os.environ.get("RLX_PASSES", "all"), "RLX_PASSES"
    if isinstance(spec, str):
        items = [s.strip() for s in spec.split(",") if s.strip()]
    elif isinstance(spec, (list, tuple, set, frozenset)) and all(isinstance(s, str) for s in spec):
        items = [s.strip() for s in spec]
    else:
        raise PassOptionError(f"{where} takes 'all', 'none' or pass names (a comma-separated string or a "
                              f"sequence of strings), got {type(spec).__name__} {spec!r}")
    lowered = [s.lower() for s in items]
    if not items or lowered == ["all"]:
        return frozenset(PASSES)
    if len(items) == 1 and lowered[0] in _OFF:
        return frozenset()
    unknown = [s for s in items if s.lstrip("-") not in PASSES]
    if unknown:
        raise PassOptionError(f"{where}: unknown pass(es) {unknown}; the passes are {', '.join(PASSES)} "
                              f"(or 'all' / 'none'; '-name' turns one off)")
    drop = {s[1:] for s in items if s.startswith("-")}
    keep = {s for s in items if not s.startswith("-")}
    if keep and drop:
        raise PassOptionError(f"{where}: give either the passes to run or '-name' entries to skip, not both: "
                              f"{items}")
    return frozenset(keep) if keep else frozenset(PASSES) - drop


@dataclass(frozen=True)
class PassChange:
    """One pass that changed the graph: its name, node counts before and after, and
    one line per change (nodes named with ``Graph.describe``: kind, name, origin)."""

    name: str
    nodes_before: int
    nodes_after: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class PassReport:
    graph: str
    enabled: frozenset
    nodes_before: int
    nodes_after: int
    changes: tuple[PassChange, ...]

    def text(self) -> str:
        if not self.enabled:
            return f"graph '{self.graph}': graph passes off ({self.nodes_before} nodes compiled as given)"
        off = sorted(set(PASSES) - self.enabled)
        lines = [f"graph '{self.graph}': {self.nodes_before} -> {self.nodes_after} nodes after graph passes"
                 + (f" (off: {', '.join(off)})" if off else "")]
        for c in self.changes:
            lines.append(f"  {c.name}: {c.nodes_before} -> {c.nodes_after} nodes")
            lines.extend(f"    {note}" for note in c.notes)
        if not self.changes:
            lines.append("  no pass changed anything")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def optimize(graph: Graph, passes: "str | Sequence[str] | None" = None) -> tuple[Graph, PassReport]:
    """``graph`` after the enabled passes (``graph`` itself when none changed it), and
    what each changed."""
    enabled = enabled_passes(passes)
    changes = []
    current = graph
    for name in ORDER:
        if name not in enabled:
            continue
        before = len(current)
        current, notes = PASSES[name](current)
        if notes:
            changes.append(PassChange(name, before, len(current), tuple(notes)))
    return current, PassReport(graph.name, enabled, len(graph), len(current), tuple(changes))

"""What a backend plugin implements: a ``Backend`` that compiles graphs into
``ExecutableGraph`` s, and the ``BackendFactory`` through which the registry finds it.

The split between factory and backend keeps discovery cheap: a factory is a small
record (name, device, priority, a cheap probe) that a plugin can return without
importing its heavy libraries; ``create()`` runs only when the backend is used.
"""
from __future__ import annotations

import abc
import difflib
import importlib.util
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import CapabilityError, PluginError
from ..ir.dtypes import DType
from ..ir.node import Node
from .device import Device, parse_device
from .stream import Pending

if TYPE_CHECKING:
    from ..ir.graph import Graph
    from ..rng import RngOptions
    from .options import CompileOptions

__all__ = ["Availability", "Backend", "ExecutableGraph", "BackendFactory", "CAPABILITIES", "check_supported_ops"]

# Capability names a backend may claim, in the order reports list them: first the
# original's ExecutableCapabilities (clone ... active_extent, in its order), then this
# project's. A backend claims one only where its compiled graphs really do it.
CAPABILITIES = {
    "clone": "CompiledGraph.clone(): a copy sharing the compiled code, with its own buffers and params",
    "moe": "mixture-of-experts hooks (resident expert masks, top-k capture)",
    "persistent_handles": "named host buffers bound once and read back between runs",
    "gpu_handles": "outputs can stay on the device",
    "kv_resident": "KV caches stay resident on the device between steps",
    "typed_io": "f16/bf16 inputs and outputs without widening",
    "async_pipeline": "submit() queues runs on the device and returns before they finish",
    "active_extent": "a run computes only the active rows of a padded (bucketed) batch",
    "out_buffers": "run(..., out=...) writes into caller buffers without a copy",
    "dlpack": "device arrays in and out through DLPack, no host copy",
    "control_flow": "if/while/scan run on the device",
    "graph_capture": "a whole run is replayed as one captured device graph",
    "fused_elementwise": "elementwise chains compile to single kernels",
    "sharding": "one graph compiled over a mesh of devices (CompileOptions(sharding=...))",
}


@dataclass(frozen=True)
class Availability:
    """Result of an availability probe: ``ok`` and, either way, a human reason/detail."""

    ok: bool
    reason: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.ok


class ExecutableGraph(abc.ABC):
    """A compiled graph on one device. ``CompiledGraph`` validates everything that
    reaches these methods (names, dims, dtypes), so implementations need not, and checks
    the count, dims and dtype of what ``run`` returns. ``run`` may be called from several
    threads at once: an implementation serializes whatever state its runs share."""

    capabilities: frozenset[str] = frozenset()

    @abc.abstractmethod
    def set_param(self, name: str, value: np.ndarray) -> None:
        """Upload (or copy) a parameter; called once per value, not per run."""

    @abc.abstractmethod
    def run(self, inputs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[Any]:
        """Run once. ``out``, when given, holds one host array per output to write into."""

    def set_rng(self, rng: "RngOptions") -> None:
        """Change rng seed/mode for the next runs without recompiling."""
        self.rng = rng

    def submit(self, inputs: Mapping[str, Any]) -> Pending:
        """Start one run and return without waiting for it (``rlx_core.runtime.stream``).

        ``inputs`` are checked like ``run``'s; the implementation must capture them before
        returning (the caller may overwrite its arrays at once) and must never let a later
        submit or run overwrite a result that a pending run will return. The default runs
        synchronously, so every backend supports ``submit``; a backend that overrides it
        to queue on its device claims ``async_pipeline``."""
        return Pending.run_now(self.run, inputs)

    def clone(self) -> "ExecutableGraph":
        """A copy sharing the compiled code (kernels, programs, plans) but owning its own
        arena, staging and params (set to this one's current values): runs and
        ``set_param`` on either never touch the other. Backends that implement it claim
        ``clone``; the default says it is missing."""
        raise CapabilityError(f"{type(self).__name__} cannot be cloned (its backend does not claim the 'clone' "
                              f"capability); compile the graph again instead")


class Backend(abc.ABC):
    """One device's compiler. Subclasses set ``name`` and ``device``."""

    name: str = "?"
    device: Device = Device.CPU

    @abc.abstractmethod
    def is_available(self) -> Availability:
        """Full probe: driver present, hardware reachable. Never raises."""

    @abc.abstractmethod
    def supported_ops(self) -> Mapping[str, "frozenset[DType] | None"]:
        """Op kind -> dtypes this backend runs (``None``: every dtype the kind accepts).

        Keys are op kinds (``rlx_core.ir.all_schemas()``, custom kinds included); values
        are ``None`` or a set of :class:`DType` members (``DType.F32``, not ``"f32"``). The
        registry checks this when it creates the backend (:func:`check_supported_ops`).
        The dtype of a node is its first input's dtype, or its output's for source ops.
        """

    def check_node(self, node: Node) -> str | None:
        """Finer rejection than kind/dtype (an attribute value, a size): reason or None."""
        return None

    def advisory_capabilities(self) -> frozenset[str]:
        return frozenset()

    def memory_capacity(self) -> int | None:
        """Bytes one compiled graph may hold on this device; ``compile_graph`` refuses a plan
        above it with a ResourceError (``rlx_core.runtime.memory_plan``). None (the default)
        means the host's physical memory, right for host devices; plugins for devices with
        memory of their own override it."""
        return None

    @abc.abstractmethod
    def compile(self, graph: "Graph", options: "CompileOptions") -> ExecutableGraph:
        """Compile a verified, legalized graph (precision policy already applied)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self.device}>"


@dataclass(frozen=True)
class BackendFactory:
    """What a plugin's ``rlx_backends`` hook returns for each backend it provides.

    ``requires`` names importable modules the backend needs; the cheap probe reports
    a missing one without importing anything. ``priority`` decides between two
    plugins serving one device (higher wins; ties break on ``name``).
    """

    name: str
    device: "Device | str"
    create: Callable[[], Backend]
    priority: int = 0
    description: str = ""
    requires: tuple[str, ...] = ()
    probe: Callable[[], Availability] | None = None

    def __post_init__(self):
        object.__setattr__(self, "device", parse_device(self.device))

    def cheap_probe(self) -> Availability:
        """Availability without importing heavy libraries (module presence + plugin probe)."""
        missing = [m for m in self.requires if importlib.util.find_spec(m) is None]
        if missing:
            return Availability(False, f"missing Python package(s): {', '.join(missing)}", {"missing": missing})
        return self.probe() if self.probe else Availability(True, "")


def check_supported_ops(backend: Backend) -> None:
    """Raise :class:`PluginError` unless ``backend.supported_ops()`` maps op kinds to None
    or to a set of :class:`DType`; the message names the backend, the kind, and what was
    expected versus given. The registry calls it when it creates a backend."""
    from ..ir.schema import all_schemas
    who = f"backend '{getattr(backend, 'name', '?')}' ({type(backend).__name__})"
    try:
        table = backend.supported_ops()
    except Exception as e:
        raise PluginError(f"{who}: supported_ops() raised {type(e).__name__}: {e}") from e
    if not isinstance(table, Mapping):
        raise PluginError(f"{who}: supported_ops() must return a mapping of op kind -> None or a set of "
                          f"rlx_core.DType, got {type(table).__name__} {_short(table)}")
    kinds = all_schemas()
    problems = []
    for kind, dtypes in table.items():
        if not isinstance(kind, str):
            problems.append(f"key {kind!r} is a {type(kind).__name__}; keys must be op kind names (str)")
        elif kind not in kinds:
            close = difflib.get_close_matches(kind, kinds, n=1)
            problems.append(f"key '{kind}' is not an op kind" + (f" (did you mean '{close[0]}'?)" if close else "")
                            + "; kinds are rlx_core.ir.all_schemas() (custom kinds: declare them with "
                              "rlx_custom_ops)")
        elif dtypes is not None:
            why = _dtype_set_problem(dtypes)
            if why:
                problems.append(f"op kind '{kind}': expected None or a set of rlx_core.DType, got {why}")
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise PluginError(f"{who}: supported_ops() is malformed: " + "; ".join(problems[:3]) + more)


def _dtype_set_problem(dtypes: Any) -> str | None:
    if isinstance(dtypes, (str, bytes, DType, Mapping)) or not isinstance(dtypes, Collection):
        return f"{type(dtypes).__name__} {_short(dtypes)}" + (
            f" (wrap it: frozenset({{{_dtype_name(dtypes)}}}))" if _dtype_name(dtypes) else "")
    bad = [d for d in dtypes if not isinstance(d, DType)]
    if not bad:
        return None
    fixes = [_dtype_name(d) for d in bad]
    hint = f" (use {', '.join(fixes)})" if all(fixes) else ""
    return f"{type(dtypes).__name__} holding {', '.join(f'{type(d).__name__} {d!r}' for d in bad[:4])}{hint}"


def _dtype_name(value: Any) -> str | None:
    """``DType.F32`` for ``"f32"`` or ``DType.F32``; None when it names no dtype."""
    try:
        return f"DType.{DType(value).name}" if isinstance(value, (str, DType)) else None
    except ValueError:
        return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

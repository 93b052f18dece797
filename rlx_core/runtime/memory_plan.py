"""Compile-time memory check: what a graph must hold at once, against what its device has.

Each backend plans its own memory (rlx-cpu's arena, XLA's buffer assignment), and found
out that a plan cannot fit only by failing to allocate it: numpy's ``MemoryError`` at
compile or run time, XLA's ``RESOURCE_EXHAUSTED``, or -- where a backend happened to fuse
the huge value away -- not at all, so one graph failed on one device and ran on another.
``check_fits`` runs in ``compile_graph`` before the backend sees the graph and raises a
:class:`~rlx_core.errors.ResourceError` naming the node and the bytes.

The estimate is a lower bound of any backend's plan, so a graph that fits is never
refused: a value lives from the node that makes it to its last reader; inputs, params,
constants and graph outputs live for the whole run; ``reshape`` results are views and
cost nothing; nothing is assumed fused away except that.
"""
from __future__ import annotations

import os
from collections import defaultdict

from ..errors import ResourceError
from ..ir.graph import Graph
from ..ir.node import Node, Ref

__all__ = ["plan_memory_bytes", "device_memory_bytes", "check_fits"]

RESIDENT_KINDS = frozenset({"input", "param", "constant"})  # held for the whole run
VIEW_KINDS = frozenset({"reshape"})  # share their source's bytes on every backend


def plan_memory_bytes(graph: Graph) -> tuple[int, Node | None]:
    """``(peak bytes live at once, the first node at which that peak is reached)``."""
    end = len(graph.nodes)
    last_use: dict[Ref, int] = {}
    for node in graph.nodes:
        for ref in node.inputs:
            last_use[ref] = node.id
    for ref in graph.outputs:
        last_use[ref] = end
    freed_after: dict[int, int] = defaultdict(int)
    live, peak, at = 0, 0, None
    for node in graph.nodes:
        if node.kind in VIEW_KINDS:
            continue
        for i, shape in enumerate(node.outputs):
            live += shape.nbytes
            dies = end if node.kind in RESIDENT_KINDS else last_use.get(Ref(node.id, i), node.id)
            freed_after[dies] += shape.nbytes
        if live > peak:
            peak, at = live, node
        live -= freed_after.pop(node.id, 0)
    return peak, at


def device_memory_bytes(backend) -> int:
    """The bytes a graph may use on ``backend``'s device: ``backend.memory_capacity()``, or
    where that is unknown (None) the host's physical memory."""
    capacity = backend.memory_capacity()
    return int(capacity) if capacity is not None else host_memory_bytes()


def host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): assume no limit we can see
        return 1 << 62


def check_fits(graph: Graph, backend, device) -> None:
    """ResourceError when one value of ``graph``, or the values it must hold at once, need
    more bytes than ``device`` has; the message names the node and the bytes."""
    capacity = device_memory_bytes(backend)
    has = f"device {device} has {_bytes(capacity)}"
    for node in graph.nodes:
        for shape in node.outputs:
            if shape.nbytes > capacity and node.kind not in VIEW_KINDS:
                raise ResourceError(
                    f"graph '{graph.name}': {graph.describe(node)} makes a value of {list(shape.dims)} {shape.dtype}: "
                    f"{_bytes(shape.nbytes)}, but {has}")
    peak, at = plan_memory_bytes(graph)
    if peak > capacity:
        raise ResourceError(f"graph '{graph.name}' needs {_bytes(peak)} live at {graph.describe(at)}, "
                            f"but {has}")


_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _bytes(nbytes: int) -> str:
    """``12288 bytes (12.0 KiB)``: exact for the reader who compares, rounded for the eye."""
    power = min(max(nbytes.bit_length() - 1, 0) // 10, len(_UNITS) - 1)
    return f"{nbytes} bytes" + (f" ({nbytes / 1024 ** power:.1f} {_UNITS[power]})" if power else "")

"""CompileCache: reuse compiled graphs across identical compile requests.

The key is the graph's fingerprint (ops, shapes, attributes and constants -- not node
names), the device, the backend serving it and the compile options. A hit returns
the very same ``CompiledGraph`` (with its params), so callers sharing a cache share
weights. Bounded (least recently used entry evicted) and safe from many threads; two
threads asking for one missing key compile it once.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from ..ir.graph import Graph
from .device import Device
from .options import CompileOptions
from .session import CompiledGraph, Session

__all__ = ["CompileCache"]


class CompileCache:
    def __init__(self, capacity: int = 64):
        if capacity < 1:
            raise ValueError(f"CompileCache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[tuple, CompiledGraph] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[tuple, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def key(self, session: Session, graph: Graph, options: CompileOptions) -> tuple:
        return (graph.fingerprint(), str(session.device), session.backend.name, options.cache_key())

    def get_or_compile(self, session: "Session | Device | str", graph: Graph,
                       options: CompileOptions | None = None) -> CompiledGraph:
        if not isinstance(session, Session):
            session = Session(session)
        options = options or session.options
        session = session.resolved(graph, options)  # Session(): the device picked for this graph
        key = self.key(session, graph, options)
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return hit
            gate = self._pending.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                hit = self._entries.get(key)
                if hit is not None:
                    self.hits += 1
                    return hit
                self.misses += 1
            compiled = session.compile(graph, options)
            with self._lock:
                self._entries[key] = compiled
                self._pending.pop(key, None)
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
            return compiled

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

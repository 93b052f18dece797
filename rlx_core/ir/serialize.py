"""Lossless JSON (de)serialisation of graphs, and the stable graph fingerprint.

The fingerprint is a SHA-256 over the same canonical encoding with debug names left
out: the same graph built twice, or in another process, gets the same key; any change
to an op, shape, attribute or constant changes it.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import Any

import numpy as np

from ..errors import GraphError
from .dtypes import DType
from .graph import Graph
from .node import Ref
from .schema import get_schema
from .shape import Shape

__all__ = ["to_json", "from_json", "to_dict", "from_dict", "fingerprint"]

FORMAT, VERSION = "rlx-graph", 1


def to_dict(graph: Graph, *, for_hash: bool = False) -> dict:
    nodes = []
    for n in graph.nodes:
        schema = n.schema
        entry = {"kind": n.kind, "inputs": [list(r) for r in n.inputs],
                 "attrs": {k: _encode(schema.attrs[k].kind, v, for_hash) for k, v in n.attrs.items()},
                 "outputs": [[list(s.dims), s.dtype.value] for s in n.outputs]}
        if n.name and not for_hash:
            entry["name"] = n.name
        nodes.append(entry)
    out = {"format": FORMAT, "version": VERSION, "nodes": nodes, "outputs": [list(r) for r in graph.outputs]}
    if not for_hash:
        out["name"] = graph.name
        out["output_names"] = graph._output_names
    return out


def from_dict(d: dict) -> Graph:
    if d.get("format") != FORMAT:
        raise GraphError(f"not an RLX graph document (format={d.get('format')!r})")
    if d.get("version") != VERSION:
        raise GraphError(f"unsupported RLX graph version {d.get('version')!r} (this build reads {VERSION})")
    g = Graph(d.get("name", "graph"))
    for i, n in enumerate(d["nodes"]):
        schema = get_schema(n["kind"])
        attrs = {k: _decode(schema.attrs[k].kind if k in schema.attrs else "any", v)
                 for k, v in n["attrs"].items()}
        shapes = [Shape(dims, dt) for dims, dt in n["outputs"]]
        g.add_node(n["kind"], [Ref(*r) for r in n["inputs"]], attrs, shape=shapes, name=n.get("name"))
    g.set_outputs([Ref(*r) for r in d["outputs"]], names=d.get("output_names"))
    return g


def to_json(graph: Graph, indent: int | None = None) -> str:
    return json.dumps(to_dict(graph), indent=indent, allow_nan=False)


def from_json(text: str) -> Graph:
    try:
        d = json.loads(text)
    except ValueError as e:
        raise GraphError(f"graph JSON is not valid JSON: {e}") from None
    return from_dict(d)


def fingerprint(graph: Graph) -> str:
    """Hex SHA-256 of the canonical, name-free encoding (cached until the graph changes)."""
    state = (len(graph.nodes), tuple(graph.outputs))
    cached = getattr(graph, "_fingerprint", None)
    if cached and cached[0] == state:
        return cached[1]
    text = json.dumps(to_dict(graph, for_hash=True), sort_keys=True, separators=(",", ":"), allow_nan=False)
    fp = hashlib.sha256(text.encode()).hexdigest()
    graph._fingerprint = (state, fp)
    return fp


def _encode(kind: str, v: Any, for_hash: bool) -> Any:
    if v is None:
        return None
    if kind == "float":
        return _float(v)
    if kind == "floats":
        return [_float(x) for x in v]
    if kind == "ints":
        return list(v)
    if kind == "dtype":
        return v.value
    if kind == "array":
        arr = np.asarray(v, order="C")
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        enc = {"dtype": DType.of(arr.dtype).value, "shape": list(arr.shape)}
        if for_hash:
            enc["sha256"] = hashlib.sha256(raw).hexdigest()
        else:
            enc["data"] = base64.b64encode(raw).decode()
        return enc
    if kind == "graph":
        return to_dict(v, for_hash=for_hash)
    if kind == "graphs":
        return [to_dict(g, for_hash=for_hash) for g in v]
    if kind == "any":
        json.dumps(v, allow_nan=False)  # must already be plain JSON
        return v
    return v


def _decode(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "float":
        return _unfloat(v)
    if kind == "floats":
        return tuple(_unfloat(x) for x in v)
    if kind == "array":
        dt = DType.of(v["dtype"])
        raw = base64.b64decode(v["data"])
        return np.frombuffer(raw, dtype=dt.np.newbyteorder("<")).astype(dt.np).reshape(tuple(v["shape"]))
    if kind == "graph":
        return from_dict(v)
    if kind == "graphs":
        return tuple(from_dict(g) for g in v)
    return v


def _float(x: float):
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _unfloat(x):
    return float(x["float"]) if isinstance(x, dict) else float(x)

"""Lossless JSON (de)serialisation of graphs, and the stable graph fingerprint.

Reading checks the document against the written format (``graph_format``) first, then
builds it node by node; every problem, found either way, is a ``GraphFormatError``
carrying the JSON path of the culprit.

The fingerprint is a SHA-256 over the same canonical encoding with debug names left
out: the same graph built twice, or in another process, gets the same key; any change
to an op, shape, attribute or constant changes it.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, GraphError, GraphFormatError
from .dtypes import DType
from .graph import Graph
from .graph_format import FORMAT, VERSION, check_document, json_path
from .node import Ref
from .schema import get_schema
from .shape import Shape

__all__ = ["to_json", "from_json", "to_dict", "from_dict", "fingerprint"]


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
    """The graph a parsed document describes; GraphFormatError (with the JSON path) if it
    is malformed in any way."""
    check_document(d)
    return _build(d, "$")


def _build(d: dict, path: str) -> Graph:
    """Build a document ``check_document`` accepted: what is left to find here is what a
    schema cannot express (references forward, bad constant data, shapes the rules reject)."""
    g = Graph(d.get("name", "graph"))
    for i, n in enumerate(d["nodes"]):
        where = json_path(json_path(path, "nodes"), i)
        for j, (node, index) in enumerate(n["inputs"]):
            if node >= i or index >= len(g.nodes[node].outputs):
                raise GraphFormatError(json_path(json_path(where, "inputs"), j),
                                       f"refers to %{node}.{index}, which is not an output of an earlier node")
        schema = get_schema(n["kind"])
        attrs = {k: _decode(schema.attrs[k].kind, v, json_path(json_path(where, "attrs"), k))
                 for k, v in n["attrs"].items()}
        try:
            shapes = [Shape(dims, dt) for dims, dt in n["outputs"]]
            g.add_node(n["kind"], [Ref(*r) for r in n["inputs"]], attrs, shape=shapes, name=n.get("name"))
        except GraphError as e:
            raise GraphFormatError(where, str(e)) from None
    outputs = json_path(path, "outputs")
    for j, (node, index) in enumerate(d["outputs"]):
        if node >= len(g.nodes) or index >= len(g.nodes[node].outputs):
            raise GraphFormatError(json_path(outputs, j), f"refers to %{node}.{index}, which does not exist")
    try:
        g.set_outputs([Ref(*r) for r in d["outputs"]], names=d.get("output_names"))
    except GraphError as e:
        raise GraphFormatError(json_path(path, "output_names"), str(e)) from None
    return g


def to_json(graph: Graph, indent: int | None = None) -> str:
    return json.dumps(to_dict(graph), indent=indent, allow_nan=False)


def from_json(text: "str | bytes") -> Graph:
    """The graph in a JSON document (``to_json``'s output); GraphFormatError with the JSON
    path of the problem for anything else, however malformed or deeply nested."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise ArgumentTypeError(f"Graph.from_json(text=...) takes the JSON text (str or bytes), got "
                                f"{type(text).__name__}; for a parsed document use rlx_core.ir.serialize.from_dict")
    try:
        d = json.loads(text)
    except RecursionError:
        raise GraphFormatError("$", "graph JSON is nested too deeply to parse") from None
    except ValueError as e:
        raise GraphFormatError("$", f"graph JSON is not valid JSON: {e}") from None
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


def _decode(kind: str, v: Any, path: str) -> Any:
    if v is None:
        return None
    if kind == "float":
        return _unfloat(v)
    if kind == "floats":
        return tuple(_unfloat(x) for x in v)
    if kind == "array":
        return _decode_array(v, path)
    if kind == "graph":
        return _build(v, path)
    if kind == "graphs":
        return tuple(_build(g, json_path(path, i)) for i, g in enumerate(v))
    return v


def _decode_array(v: dict, path: str) -> np.ndarray:
    dt, shape = DType.of(v["dtype"]), tuple(v["shape"])
    try:
        raw = base64.b64decode(v["data"], validate=True)
    except (binascii.Error, ValueError) as e:
        raise GraphFormatError(json_path(path, "data"), f"constant data is not base64: {e}") from None
    count = 1
    for d in shape:
        count *= d
    if len(raw) != count * dt.itemsize:
        raise GraphFormatError(json_path(path, "data"), f"holds {len(raw)} bytes; {list(shape)} {dt} needs "
                                                        f"{count * dt.itemsize}")
    return np.frombuffer(raw, dtype=dt.np.newbyteorder("<")).astype(dt.np).reshape(shape)


def _float(x: float):
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def _unfloat(x):
    return float(x["float"]) if isinstance(x, dict) else float(x)

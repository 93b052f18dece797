"""The graph document format (``Graph.to_json``), written down as a JSON Schema, and its check.

``SCHEMA`` is the format, version 1, in JSON Schema (draft 2020-12) terms; the value of
each node attribute follows ``ATTRIBUTE_SCHEMAS`` for the kind its op declares (an
``int`` attribute is an integer, an ``array`` is ``{"dtype", "shape", "data": base64}``,
a ``graph`` is a whole nested document ...). :func:`check_document` checks a parsed
document against both before anything is built from it, so that every malformed
document -- the wrong top-level type, a missing key, a value of the wrong type, a
reference of the wrong arity, nesting deeper than ``MAX_DEPTH`` -- raises a
:class:`~rlx_core.errors.GraphFormatError` carrying the JSON path of the problem
(``$.nodes[3].inputs[0]``) instead of a ``KeyError`` or ``RecursionError`` from inside
the loader. What a schema cannot say (constant data that is not base64 or not of its
shape's size, a reference to a later node, a shape that disagrees with the op's rule)
is checked while building, with the same kind of error and path (``serialize``).

The checker implements the part of JSON Schema that ``SCHEMA`` uses: ``type``, ``const``,
``enum``, ``properties``, ``required``, ``additionalProperties: false``, ``items``,
``prefixItems``, ``minItems``, ``maxItems``, ``minimum``, ``anyOf`` and local ``$ref``.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import GraphError, GraphFormatError
from .dtypes import DType
from .schema import get_schema

__all__ = ["SCHEMA", "ATTRIBUTE_SCHEMAS", "MAX_DEPTH", "check_document", "json_path"]

FORMAT, VERSION = "rlx-graph", 1
MAX_DEPTH = 256  # JSON nesting levels: 60 levels of nested control flow, far from Python's stack limit

_INDEX = {"type": "integer", "minimum": 0}
_FLOAT = {"anyOf": [{"type": "number"},
                    {"type": "object", "required": ["float"], "additionalProperties": False,
                     "properties": {"float": {"enum": ["nan", "inf", "-inf"]}}}],
          "description": 'a number, or {"float": "nan" | "inf" | "-inf"}'}

SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": f"RLX graph document ({FORMAT}, version {VERSION})",
    "type": "object",
    "required": ["format", "version", "nodes", "outputs"],
    "additionalProperties": False,
    "properties": {
        "format": {"const": FORMAT},
        "version": {"const": VERSION},
        "name": {"type": "string"},
        "nodes": {"type": "array", "items": {"$ref": "#/$defs/node"}},
        "outputs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/ref"}},
        "output_names": {"type": "array", "items": {"type": ["string", "null"]}},
    },
    "$defs": {
        "index": _INDEX,
        "ref": {"type": "array", "prefixItems": [_INDEX, _INDEX], "minItems": 2, "maxItems": 2,
                "description": "a value reference [node, output index]"},
        "dtype": {"enum": [d.value for d in DType]},
        "tensor_type": {"type": "array", "prefixItems": [{"type": "array", "items": _INDEX}, {"$ref": "#/$defs/dtype"}],
                        "minItems": 2, "maxItems": 2, "description": "an output type [dims, dtype]"},
        "node": {
            "type": "object",
            "x-rlx-attributes": "each value of attrs follows ATTRIBUTE_SCHEMAS for its kind in the op's schema",
            "required": ["kind", "inputs", "attrs", "outputs"],
            "additionalProperties": False,
            "properties": {
                "kind": {"type": "string"},
                "inputs": {"type": "array", "items": {"$ref": "#/$defs/ref"}},
                "attrs": {"type": "object", "description": "attribute name -> value, as ATTRIBUTE_SCHEMAS[kind]"},
                "outputs": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/tensor_type"}},
                "name": {"type": ["string", "null"]},
            },
        },
        "array": {"type": "object", "required": ["dtype", "shape", "data"], "additionalProperties": False,
                  "properties": {"dtype": {"$ref": "#/$defs/dtype"}, "shape": {"type": "array", "items": _INDEX},
                                 "data": {"type": "string", "description": "little-endian bytes, base64"}}},
    },
}

# attribute kind (rlx_core.ir.schema.Attr.kind) -> the schema of its values
ATTRIBUTE_SCHEMAS: dict[str, dict] = {
    "int": {"type": "integer"},
    "float": _FLOAT,
    "floats": {"type": "array", "items": _FLOAT},
    "bool": {"type": "boolean"},
    "str": {"type": "string"},
    "ints": {"type": "array", "items": {"type": "integer"}},
    "dtype": {"$ref": "#/$defs/dtype"},
    "array": {"$ref": "#/$defs/array"},
    "graph": {"$ref": "#"},
    "graphs": {"type": "array", "items": {"$ref": "#"}},
    "any": {},
}

_JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def check_document(doc: Any, path: str = "$") -> None:
    """GraphFormatError (with the JSON path) unless ``doc`` follows ``SCHEMA`` and every
    node's attributes follow ``ATTRIBUTE_SCHEMAS`` for its op kind."""
    _check_depth(doc, path)
    if not isinstance(doc, dict):
        raise GraphFormatError(path, f"a graph document is a JSON object, got {_json_type(doc)}")
    if doc.get("format") != FORMAT:
        raise GraphFormatError(f"{path}.format", f"not an RLX graph document (format={doc.get('format')!r}, "
                                                 f"expected {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise GraphFormatError(f"{path}.version", f"unsupported RLX graph version {doc.get('version')!r} "
                                                  f"(this build reads {VERSION})")
    _check(doc, SCHEMA, path)


def json_path(path: str, key: "str | int") -> str:
    """``path`` extended by an object key or array index: ``$.nodes[3].attrs.axis``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json.dumps(key)}]"


def _check_depth(doc: Any, path: str) -> None:
    """Nesting beyond MAX_DEPTH is refused before anything recurses over the document."""
    stack = [(doc, 1, path)]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise GraphFormatError(where, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            stack.extend((v, depth + 1, json_path(where, k)) for k, v in value.items()
                         if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1, json_path(where, i)) for i, v in enumerate(value)
                         if isinstance(v, (dict, list)))


def _check(value: Any, schema: dict, path: str) -> None:
    while "$ref" in schema:
        schema = _resolve(schema["$ref"])
    if "anyOf" in schema:
        if not any(_fits(value, option, path) for option in schema["anyOf"]):
            raise GraphFormatError(path, f"expected {schema.get('description', 'another value')}, got {_show(value)}")
        return
    if "const" in schema and not _same(value, schema["const"]):
        raise GraphFormatError(path, f"expected {schema['const']!r}, got {_show(value)}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        raise GraphFormatError(path, f"expected one of {', '.join(map(repr, schema['enum']))}, got {_show(value)}")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, t) for t in types):
            what = schema.get("description", " or ".join(types))
            raise GraphFormatError(path, f"expected {what}, got {_show(value)}")
    if isinstance(value, dict):
        _check_object(value, schema, path)
    elif isinstance(value, list):
        _check_array(value, schema, path)
    elif "minimum" in schema and value < schema["minimum"]:
        raise GraphFormatError(path, f"expected a number >= {schema['minimum']}, got {_show(value)}")


def _check_object(value: dict, schema: dict, path: str) -> None:
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", ()) if k not in value]
    if missing:
        raise GraphFormatError(path, f"missing {', '.join(map(repr, missing))} (an object with "
                                     f"{', '.join(map(repr, props))})")
    for key, item in value.items():
        if key in props:
            _check(item, props[key], json_path(path, key))
        elif schema.get("additionalProperties", True) is False:
            raise GraphFormatError(json_path(path, key), f"unknown key {key!r}; expected one of "
                                                         f"{', '.join(map(repr, props))}")
    if "x-rlx-attributes" in schema:
        _check_attrs(value, path)


def _check_array(value: list, schema: dict, path: str) -> None:
    what = schema.get("description", "an array")
    if len(value) < schema.get("minItems", 0):
        raise GraphFormatError(path, f"expected {what} of at least {schema['minItems']} item(s), got {len(value)}")
    if len(value) > schema.get("maxItems", len(value)):
        raise GraphFormatError(path, f"expected {what} of at most {schema['maxItems']} item(s), got {len(value)}")
    prefix = schema.get("prefixItems", [])
    for i, item in enumerate(value):
        sub = prefix[i] if i < len(prefix) else schema.get("items")
        if sub is not None:
            _check(item, sub, json_path(path, i))


def _check_attrs(node: dict, path: str) -> None:
    """Every attribute of the node at ``path`` declared by its op kind, each value of the
    schema of that attribute's kind."""
    try:
        op = get_schema(node["kind"])
    except GraphError as e:
        raise GraphFormatError(json_path(path, "kind"), str(e)) from None
    for name, value in node["attrs"].items():
        where = json_path(json_path(path, "attrs"), name)
        spec = op.attrs.get(name)
        if spec is None:
            raise GraphFormatError(where, f"op kind '{op.kind}' has no attribute {name!r}; its attributes: "
                                          f"{', '.join(op.attrs) or 'none'}")
        if value is None:
            if not (spec.optional or spec.default is None):
                raise GraphFormatError(where, f"attribute {name!r} of {op.kind} cannot be null ({spec.kind})")
            continue
        _check(value, ATTRIBUTE_SCHEMAS[spec.kind], where)


def _fits(value: Any, schema: dict, path: str) -> bool:
    try:
        _check(value, schema, path)
    except GraphFormatError:
        return False
    return True


def _resolve(ref: str) -> dict:
    if ref == "#":
        return SCHEMA
    return SCHEMA["$defs"][ref.rsplit("/", 1)[-1]]


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _JSON_TYPES[name])


def _same(value: Any, expected: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return type(value) is type(expected) and value == expected


def _json_type(value: Any) -> str:
    for name, cls in (("null", type(None)), ("a boolean", bool), ("an integer", int), ("a number", float),
                      ("a string", str), ("an array", list), ("an object", dict)):
        if isinstance(value, cls):
            return name
    return type(value).__name__


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else ""
    return f"{_json_type(value)} {text}" if text and len(text) <= 40 else _json_type(value)

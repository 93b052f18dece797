"""Graph.from_json on malformed documents (issue 20, item 8): every one raises a
GraphFormatError (a GraphError and a ValueError) carrying the JSON path of the problem,
never a KeyError, TypeError, AttributeError or RecursionError."""
import base64
import copy
import json

import numpy as np
import pytest

from rlx_core import Graph, Shape
from rlx_core.errors import ArgumentTypeError, GraphError, GraphFormatError
from rlx_core.ir.graph_format import ATTRIBUTE_SCHEMAS, MAX_DEPTH, SCHEMA
from rlx_core.ir.schema import _ATTR_KINDS
from rlx_core.ir.serialize import from_dict, to_dict


def _doc():
    g = Graph("doc")
    x = g.input("x", Shape((2, 3), "f32"))
    k = g.constant(np.arange(3, dtype=np.float32))
    y = g.softmax(x + k, axis=-1)
    g.set_outputs([y, g.sum(y, 1)], names=["y", "s"])
    return to_dict(g)


def _with(change):
    d = copy.deepcopy(_doc())
    change(d)
    return json.dumps(d)


def _set(path, value):
    def change(d):
        *head, last = path
        target = d
        for key in head:
            target = target[key]
        target[last] = value
    return change


def _delete(path):
    def change(d):
        *head, last = path
        target = d
        for key in head:
            target = target[key]
        del target[last]
    return change


# (document text, the JSON path the error must carry)
MALFORMED = {
    "top level array": ("[]", "$"),
    "top level number": ("5", "$"),
    "top level string": ('"graph"', "$"),
    "top level null": ("null", "$"),
    "not json": ("{nope", "$"),
    "foreign format": ('{"format": "onnx"}', "$.format"),
    "wrong version": (_with(_set(["version"], 2)), "$.version"),
    "version true": (_with(_set(["version"], True)), "$.version"),
    "missing nodes": (_with(_delete(["nodes"])), "$"),
    "missing outputs": (_with(_delete(["outputs"])), "$"),
    "nodes not a list": (_with(_set(["nodes"], {"0": 1})), "$.nodes"),
    "node not an object": (_with(_set(["nodes", 1], [1, 2])), "$.nodes[1]"),
    "missing kind": (_with(_delete(["nodes", 0, "kind"])), "$.nodes[0]"),
    "missing attrs": (_with(_delete(["nodes", 0, "attrs"])), "$.nodes[0]"),
    "missing inputs": (_with(_delete(["nodes", 2, "inputs"])), "$.nodes[2]"),
    "missing node outputs": (_with(_delete(["nodes", 2, "outputs"])), "$.nodes[2]"),
    "kind not a string": (_with(_set(["nodes", 0, "kind"], 7)), "$.nodes[0].kind"),
    "unknown kind": (_with(_set(["nodes", 0, "kind"], "frobnicate")), "$.nodes[0].kind"),
    "unknown node key": (_with(_set(["nodes", 0, "kinds"], "input")), "$.nodes[0].kinds"),
    "attrs a list": (_with(_set(["nodes", 0, "attrs"], [])), "$.nodes[0].attrs"),
    "unknown attribute": (_with(_set(["nodes", 3, "attrs", "axes"], 1)), "$.nodes[3].attrs.axes"),
    "int attribute a string": (_with(_set(["nodes", 3, "attrs", "axis"], "-1")), "$.nodes[3].attrs.axis"),
    "int attribute a bool": (_with(_set(["nodes", 3, "attrs", "axis"], True)), "$.nodes[3].attrs.axis"),
    "str attribute a number": (_with(_set(["nodes", 0, "attrs", "name"], 5)), "$.nodes[0].attrs.name"),
    "dtype attribute unknown": (_with(_set(["nodes", 0, "attrs", "dtype"], "f99")), "$.nodes[0].attrs.dtype"),
    "ints attribute a number": (_with(_set(["nodes", 0, "attrs", "dims"], 3)), "$.nodes[0].attrs.dims"),
    "required attribute null": (_with(_set(["nodes", 0, "attrs", "name"], None)), "$.nodes[0].attrs.name"),
    "missing required attribute": (_with(_delete(["nodes", 0, "attrs", "name"])), "$.nodes[0]"),
    "ref of one": (_with(_set(["nodes", 2, "inputs", 0], [0])), "$.nodes[2].inputs[0]"),
    "ref of three": (_with(_set(["nodes", 2, "inputs", 0], [0, 0, 0])), "$.nodes[2].inputs[0]"),
    "ref a number": (_with(_set(["nodes", 2, "inputs", 0], 0)), "$.nodes[2].inputs[0]"),
    "ref of strings": (_with(_set(["nodes", 2, "inputs", 0], ["0", "0"])), "$.nodes[2].inputs[0][0]"),
    "ref negative": (_with(_set(["nodes", 2, "inputs", 0], [-1, 0])), "$.nodes[2].inputs[0][0]"),
    "ref forward": (_with(_set(["nodes", 2, "inputs", 0], [5, 0])), "$.nodes[2].inputs[0]"),
    "ref to a missing output": (_with(_set(["nodes", 2, "inputs", 0], [0, 3])), "$.nodes[2].inputs[0]"),
    "graph output of one": (_with(_set(["outputs", 0], [3])), "$.outputs[0]"),
    "graph output missing": (_with(_set(["outputs", 0], [99, 0])), "$.outputs[0]"),
    "no graph outputs": (_with(_set(["outputs"], [])), "$.outputs"),
    "output names too few": (_with(_set(["output_names"], ["y"])), "$.output_names"),
    "output type not a pair": (_with(_set(["nodes", 0, "outputs", 0], [[2, 3]])), "$.nodes[0].outputs[0]"),
    "output dims negative": (_with(_set(["nodes", 0, "outputs", 0], [[-2, 3], "f32"])), "$.nodes[0].outputs[0][0][0]"),
    "output dtype unknown": (_with(_set(["nodes", 0, "outputs", 0], [[2, 3], "float99"])), "$.nodes[0].outputs[0][1]"),
    "output shape wrong": (_with(_set(["nodes", 2, "outputs", 0], [[3, 2], "f32"])), "$.nodes[2]"),
    "constant data not base64": (_with(_set(["nodes", 1, "attrs", "value", "data"], "%%%")),
                                 "$.nodes[1].attrs.value.data"),
    "constant data too short": (_with(_set(["nodes", 1, "attrs", "value", "data"],
                                           base64.b64encode(b"\0" * 8).decode())), "$.nodes[1].attrs.value.data"),
    "constant data a number": (_with(_set(["nodes", 1, "attrs", "value", "data"], 12)),
                               "$.nodes[1].attrs.value.data"),
    "constant shape huge": (_with(_set(["nodes", 1, "attrs", "value", "shape"], [2 ** 40])),
                            "$.nodes[1].attrs.value.data"),
    "constant without dtype": (_with(_delete(["nodes", 1, "attrs", "value", "dtype"])), "$.nodes[1].attrs.value"),
    "float attribute bad special": (None, None),  # filled below (needs a float attribute)
    "name not a string": (_with(_set(["name"], 5)), "$.name"),
    "deep array": ("[" * 100_000 + "]" * 100_000, "$"),
    "deep object": ('{"a":' * 100_000 + "1" + "}" * 100_000, "$"),
}


def _float_attr_doc():
    g = Graph("f")
    x = g.input("x", Shape((2,), "f32"))
    g.set_outputs([g.pad(x, [(1, 1)], value=0.5)])
    d = to_dict(g)
    d["nodes"][1]["attrs"]["value"] = {"float": "lots"}
    return json.dumps(d), "$.nodes[1].attrs.value"


MALFORMED["float attribute bad special"] = _float_attr_doc()


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_documents_raise_graph_format_error_with_the_path(name):
    text, path = MALFORMED[name]
    with pytest.raises(GraphFormatError) as info:
        Graph.from_json(text)
    err = info.value
    assert isinstance(err, GraphError) and isinstance(err, ValueError)
    assert err.path == path, (err.path, str(err))
    assert str(err).startswith(f"{path}: ")


def test_nesting_just_below_the_limit_is_refused_cleanly_too():
    deep = {"format": "rlx-graph", "version": 1, "nodes": [], "outputs": [[0, 0]], "name": "x"}
    inner = deep
    for _ in range(MAX_DEPTH):
        inner["name_"] = {}
        inner = inner["name_"]
    with pytest.raises(GraphFormatError, match=f"nested more than {MAX_DEPTH} levels"):
        from_dict(deep)


def test_from_json_takes_text():
    with pytest.raises(ArgumentTypeError, match="text"):
        Graph.from_json({"format": "rlx-graph"})


def test_nested_graphs_are_checked_with_their_path():
    g = Graph("nested")
    x = g.input("x", (3,))
    g.set_outputs([g.cond(g.gt(g.input("t", ()), 0.0), lambda s, v: s.exp(v), lambda s, v: s.neg(v), [x])])
    d = to_dict(g)
    assert from_dict(copy.deepcopy(d)).fingerprint() == g.fingerprint()
    k, node = next((k, n) for k, n in enumerate(d["nodes"]) if n["kind"] == "if")
    branch = next(name for name, v in node["attrs"].items() if isinstance(v, dict) and "nodes" in v)
    node["attrs"][branch]["nodes"][1]["inputs"] = [[0]]
    with pytest.raises(GraphFormatError) as info:
        from_dict(d)
    assert info.value.path == f"$.nodes[{k}].attrs.{branch}.nodes[1].inputs[0]"


def test_the_schema_covers_every_attribute_kind():
    assert set(ATTRIBUTE_SCHEMAS) == set(_ATTR_KINDS)
    assert SCHEMA["$defs"]["dtype"]["enum"] and json.dumps(SCHEMA)  # the schema is plain JSON

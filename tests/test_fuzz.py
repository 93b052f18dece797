"""Property-based fuzzing (hypothesis, bounded for CI) of the graph builder and of graph JSON.

* builder: random chains of builder calls, with operands and Python scalars of every
  kind (out-of-range ints, inf/nan, huge floats, None, strings, complex), either build
  or raise an RlxError -- never another exception; what builds verifies and round-trips
  through JSON to the same fingerprint;
* JSON: arbitrary JSON values, and valid documents with one part replaced, deleted or
  wrapped, either load or raise GraphFormatError with a JSON path -- never another
  exception; what loads round-trips.
"""
import copy
import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlx_core import Graph, Shape
from rlx_core.errors import GraphFormatError, RlxError
from rlx_core.ir.ops.elementwise import BINARY as BINARY_KINDS, COMPARE as COMPARE_KINDS, UNARY as UNARY_KINDS
from rlx_core.ir.serialize import from_dict, to_dict

FUZZ = settings(max_examples=150, deadline=2000, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

DTYPES = ["f32", "f16", "bf16", "f64", "i8", "i32", "i64", "u8", "bool", "c64"]
SCALARS = st.one_of(
    st.integers(min_value=-2 ** 70, max_value=2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=3), st.complex_numbers(max_magnitude=1e6),
    st.sampled_from([0, 1, -1, 127, 128, 255, 256, 2 ** 31, 2 ** 63, 1.5, 1e40, -1e300, 65504.0, 65520.0]))
UNARY = sorted(UNARY_KINDS)
BINARY = sorted(BINARY_KINDS) + sorted(COMPARE_KINDS)
DIMS = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)

STEP = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(UNARY)),
    st.tuples(st.just("scalar"), st.sampled_from(BINARY), SCALARS, st.booleans()),
    st.tuples(st.just("binary"), st.sampled_from(BINARY), st.integers(0, 10)),
    st.tuples(st.just("cast"), st.sampled_from(DTYPES)),
    st.tuples(st.just("reshape"), DIMS),
    st.tuples(st.just("sum"), st.integers(-3, 3)),
    st.tuples(st.just("index"), st.integers(-5, 5)),
)


def _apply(g, values, step):
    x = values[-1]
    kind = step[0]
    if kind == "unary":
        return getattr(g, step[1])(x)
    if kind == "scalar":
        _, op, scalar, left = step
        return getattr(g, op)(scalar, x) if left else getattr(g, op)(x, scalar)
    if kind == "binary":
        return getattr(g, step[1])(x, values[step[2] % len(values)])
    if kind == "cast":
        return x.astype(step[1])
    if kind == "reshape":
        return x.reshape(step[1])
    if kind == "sum":
        return g.sum(x, step[1])
    return x[step[1]]


@FUZZ
@given(dtype=st.sampled_from(DTYPES), dims=DIMS, steps=st.lists(STEP, min_size=1, max_size=8))
def test_builder_builds_or_raises_rlx_errors(dtype, dims, steps):
    g = Graph("fuzz")
    values = [g.input("x", Shape(dims, dtype))]
    for step in steps:
        try:
            values.append(_apply(g, values, step))
        except RlxError:
            continue
    g.set_outputs([values[-1]])
    g.verify()
    back = Graph.from_json(g.to_json())
    assert back.fingerprint() == g.fingerprint()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 64, 2 ** 64) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


def _valid_doc():
    g = Graph("doc")
    x = g.input("x", Shape((2, 3), "f32"))
    k = g.constant(np.arange(3, dtype=np.float32))
    y = g.cond(g.gt(g.input("t", ()), 0.0), lambda s, v: s.exp(v), lambda s, v: s.neg(v), [g.softmax(x + k)])
    g.set_outputs([y, g.sum(y, 1)], names=["y", "s"])
    return to_dict(g)


DOC = _valid_doc()


def _paths(value, path=()):
    """Every path into a parsed JSON value (keys and indices)."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, path + (i,))


PATHS = [p for p in _paths(DOC) if p]


def _load(doc):
    """from_dict, which must either build a graph that round-trips or raise GraphFormatError."""
    try:
        g = from_dict(doc)
    except GraphFormatError as e:
        assert e.path.startswith("$") and str(e).startswith(e.path)
        return
    assert from_dict(to_dict(g)).fingerprint() == g.fingerprint()


@FUZZ
@given(value=JSON)
def test_arbitrary_json_is_refused_with_a_path(value):
    _load(value)
    _load({"format": "rlx-graph", "version": 1, "nodes": value, "outputs": [[0, 0]]})


@FUZZ
@given(path=st.sampled_from(PATHS), how=st.sampled_from(["replace", "delete", "wrap"]), value=JSON)
def test_mutated_documents_load_or_raise_graph_format_error(path, how, value):
    doc = copy.deepcopy(DOC)
    *head, last = path
    parent = doc
    for key in head:
        parent = parent[key]
    if how == "replace":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    else:
        parent[last] = [parent[last]]
    _load(doc)
    _load(json.loads(json.dumps(doc)))  # the same through text

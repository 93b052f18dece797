"""IR: dtypes and promotion, shapes, the builder's checks, verification, JSON, fingerprints."""
import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from rlx_core import DType, Graph, Shape, promote
from rlx_core.errors import DTypeError, GraphError, OpAttributeError, ShapeError
from rlx_core.ir import Ref

D = DType


@pytest.mark.parametrize("a,b,want", [
    (D.F32, D.F32, D.F32), (D.BOOL, D.I8, D.I8), (D.U8, D.I8, D.I16), (D.U32, D.I32, D.I64),
    (D.U32, D.I64, D.I64), (D.I8, D.I32, D.I32), (D.I64, D.F16, D.F16), (D.I32, D.BF16, D.BF16),
    (D.F16, D.BF16, D.F32), (D.F16, D.F32, D.F32), (D.F32, D.F64, D.F64), (D.C64, D.F64, D.C128),
    (D.C64, D.F32, D.C64), (D.C64, D.I64, D.C64), (D.C128, D.F16, D.C128), (D.BOOL, D.BOOL, D.BOOL),
])
def test_promotion_table(a, b, want):
    assert promote(a, b) is want and promote(b, a) is want


def test_promotion_is_associative_enough_for_builders():
    for a in D:
        for b in D:
            for c in D:
                assert promote(promote(a, b), c) is promote(a, promote(b, c)), (a, b, c)


def test_dtype_parsing():
    assert D.of("float32") is D.F32 and D.of(np.float16) is D.F16 and D.of(ml_dtypes.bfloat16) is D.BF16
    assert D.of("half") is D.F16 and D.of(np.dtype("complex128")) is D.C128
    with pytest.raises(DTypeError, match="unknown dtype 'float128x'"):
        D.of("float128x")


def test_shape_validation():
    assert Shape((), "f32").rank == 0 and Shape((2, 0), "i8").size == 0
    with pytest.raises(ShapeError, match="negative"):
        Shape((2, -1))
    with pytest.raises(ShapeError, match="not an integer"):
        Shape((2.5,))


def test_builder_errors_name_the_node_and_the_mismatch():
    g = Graph("g")
    x = g.input("x", (2, 3))
    y = g.input("y", (4,))
    with pytest.raises(ShapeError, match=r"node %2 add: cannot broadcast .*sizes 3 and 4"):
        g.add(x, y)
    with pytest.raises(DTypeError, match="log does not accept i32"):
        g.log(g.input("i", (2,), "i32"))
    with pytest.raises(OpAttributeError, match="no attribute"):
        g.op("exp", x, axis=1)
    with pytest.raises(GraphError, match="unknown op kind 'exq'; did you mean .*exp"):
        g.op("exq", x)
    with pytest.raises(GraphError, match="takes 1 input"):
        g.op("exp", x, x)
    with pytest.raises(GraphError, match="already used"):
        g.input("x", (1,))


def test_explicit_shape_is_verified():
    g = Graph("g")
    x = g.input("x", Shape((1, 4), "f32"))
    assert g.add(x, x, Shape((1, 4), "f32")).dims == (1, 4)
    with pytest.raises(ShapeError, match=r"given shape Shape\(\[1, 2\], f32\) but the add rule gives"):
        g.add(x, x, Shape((1, 2), "f32"))


def test_values_from_other_graphs_are_rejected():
    a, b = Graph("a"), Graph("b")
    x = a.input("x", (2,))
    with pytest.raises(GraphError, match="belongs to graph 'a'"):
        b.neg(x)


def test_operators_and_python_numbers():
    g = Graph("g")
    x = g.input("x", (3,), "f16")
    y = (2 * x + 1.5) / x - x ** 2.0
    assert y.dtype is D.F16 and y.dims == (3,)
    c = x < 1
    assert c.dtype is D.BOOL


def _sample_graph():
    g = Graph("sample")
    x = g.input("x", (2, 3), "f32")
    w = g.param("w", (3,), "bf16")
    k = g.constant(np.array([[1.5, np.nan, -np.inf]], dtype=np.float32), name="k")
    y = g.where(x > 0, x * g.cast(w, "f32"), k)
    g.set_outputs([y, g.arange(4, start=0.5, step=0.25, dtype="f64")], names=["y", "r"])
    return g


def test_json_round_trip_is_lossless():
    g = _sample_graph()
    h = Graph.from_json(g.to_json())
    assert h.to_json() == g.to_json()
    assert h.fingerprint() == g.fingerprint()
    assert h.output_names == ["y", "r"]
    assert [n.kind for n in h] == [n.kind for n in g]
    k = h.nodes[2].attrs["value"]
    assert k.dtype == np.float32 and np.isnan(k[0, 1]) and k[0, 2] == -np.inf


def test_json_rejects_foreign_documents():
    with pytest.raises(GraphError, match="not valid JSON"):
        Graph.from_json("{nope")
    with pytest.raises(GraphError, match="not an RLX graph"):
        Graph.from_json(json.dumps({"format": "onnx"}))


def test_fingerprint_is_stable_across_processes_and_sensitive_to_changes():
    code = ("import sys; sys.path.insert(0, %r); from test_ir import _sample_graph; "
            "print(_sample_graph().fingerprint())" % __file__.rsplit("/", 1)[0])
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == _sample_graph().fingerprint()

    base = _sample_graph().fingerprint()
    variants = []
    g = Graph("sample")  # a different constant value
    x = g.input("x", (2, 3)); w = g.param("w", (3,), "bf16")
    k = g.constant(np.array([[1.5, 0.0, -np.inf]], dtype=np.float32))
    g.set_outputs([g.where(x > 0, x * g.cast(w, "f32"), k), g.arange(4, start=0.5, step=0.25, dtype="f64")])
    variants.append(g)
    g = Graph("sample")  # a different attribute
    x = g.input("x", (2, 3)); w = g.param("w", (3,), "bf16")
    k = g.constant(np.array([[1.5, np.nan, -np.inf]], dtype=np.float32))
    g.set_outputs([g.where(x > 0, x * g.cast(w, "f32"), k), g.arange(4, start=0.5, step=0.5, dtype="f64")])
    variants.append(g)
    g = _sample_graph()  # different outputs
    g.set_outputs([g.nodes[-2].id and Ref(g.nodes[-2].id)])
    variants.append(g)
    fps = {v.fingerprint() for v in variants}
    assert base not in fps and len(fps) == len(variants)
    renamed = _sample_graph()
    renamed.name = "other"
    assert renamed.fingerprint() == base  # names are not semantics


def test_verify_catches_tampering():
    g = _sample_graph()
    g.verify()
    from rlx_core.ir import Node
    bad = g.nodes[3]
    g.nodes[3] = Node(bad.id, bad.kind, bad.inputs, bad.attrs, (Shape((9,), "bool"),), bad.name)
    with pytest.raises(GraphError, match="stores"):
        g.verify()
    empty = Graph("e")
    empty.input("x", (1,))
    with pytest.raises(GraphError, match="no outputs"):
        empty.verify()

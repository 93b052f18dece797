"""Every op kind has a builder, a shape rule, a reference kernel and conformance cases
for every dtype it accepts; the conformance suite must never silently skip a kind."""
from collections import defaultdict

import pytest

from rlx_core.ir import DType, Graph, all_schemas
from rlx_core.reference import has_kernel
from rlx_core.passes import apply_precision
from rlx_core.runtime import PrecisionPolicy
from rlx_core.testing import all_cases, build_case

BUILTIN = {k: s for k, s in all_schemas().items() if not s.custom}


def _builder_name(schema):
    return schema.meta.get("builder", schema.kind)


@pytest.fixture(scope="module")
def covered():
    out = defaultdict(set)
    for case in all_cases():
        out[case.kind].add(case.dtype)
    return out


@pytest.mark.parametrize("kind", sorted(BUILTIN))
def test_kind_is_complete(kind, covered):
    schema = BUILTIN[kind]
    assert schema.doc, f"{kind}: the shape rule needs a docstring defining the op"
    assert hasattr(Graph, _builder_name(schema)), f"{kind}: Graph has no builder method"
    if kind not in ("input", "param"):
        assert has_kernel(kind), f"{kind}: no reference kernel"
    dts = covered.get(kind, set())
    if schema.dtypes is not None:
        missing = schema.dtypes - dts
        assert not missing, f"{kind}: no conformance case for {sorted(d.value for d in missing)}"
    else:
        assert DType.F32 in dts and len(dts) >= 3, f"{kind}: cases cover only {sorted(d.value for d in dts)}"


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.id)
def test_case_graphs_are_canonical_serializable_and_take_every_policy(case):
    """Re-running each rule on its canonical attributes changes nothing (verify, and a
    JSON round trip that re-adds every node, keep the fingerprint), and every precision
    policy rewrites the graph into one that verifies."""
    g = build_case(case).verify()
    assert Graph.from_json(g.to_json()).fingerprint() == g.fingerprint()
    for policy in PrecisionPolicy:
        apply_precision(g, policy).verify()

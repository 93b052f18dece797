"""The ane lowering, checked where Core ML cannot run (Linux CI): every conformance case
the ane backend claims is lowered to a Core ML ML Program and

* every node's MIL values have the graph's dims and dtypes, and its lowering emitted the
  MIL op it is built on;
* coremltools converts the program (MIL passes, type checks, serialization) for the
  compute units the backend picks, and without optimization passes the serialized
  program reads back (coremltools' protobuf loader) with the same ops, inputs and outputs;
* the program's numbers, computed by coremltools' own value inference of the MIL ops (its
  numpy definitions of them), match the reference interpreter at the conformance
  tolerances -- for the outputs whose ops define value inference (not conv and pools).

Every other case must be rejected by legalize with a reason. Nothing here runs Core ML.
"""
import importlib.util

import numpy as np
import pytest

from rlx_core import CompileOptions
from rlx_core.passes.legalize import node_dtype, unsupported_nodes
from rlx_core.reference import evaluate as reference
from rlx_core.testing import all_cases, build_case, make_data
from rlx_core.testing.compare import mismatch_report
from rlx_metal.coreml import support

if importlib.util.find_spec("coremltools") is None:  # found without importing it (seconds, and torch)
    pytest.skip("coremltools is not installed", allow_module_level=True)
CASES = all_cases()


class _Claims:
    name = "coreml-ane"

    def supported_ops(self):
        return support.supported_ops()

    def check_node(self, node):
        return support.check_node(node)


@pytest.fixture(scope="module")
def mil():
    from rlx_metal.coreml import lower, validate
    return lower, validate


@pytest.mark.no_adapter
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_lowers_to_a_valid_program(case, mil):
    lower, validate = mil
    g = build_case(case)
    bad = unsupported_nodes(g, _Claims())
    if bad:
        assert all(reason for _, reason in bad)
        pytest.skip(f"rejected by legalize: {bad[0][1]}")
    from rlx_metal.coreml.backend import resolve_units
    lowered = lower.lower(g)
    assert validate.check_lowering(lowered) == []
    if lowered.program is not None:
        built = validate.built_ops(lowered)
        model = validate.convert(lowered, optimize=False)
        assert validate.check_roundtrip(lowered, model, built) == []
        units = resolve_units(g, CompileOptions())
        optimized = validate.convert(lower.lower(g), units)
        assert validate.check_roundtrip(lowered, optimized) == []
    inputs, params = make_data(case, 0)
    expected = reference(g, inputs, params)
    got = validate.evaluate(g, inputs, params)
    checked = 0
    for i, (a, e) in enumerate(zip(got, expected)):
        if a is None:  # an op without value inference (conv, pools) feeds this output
            continue
        problem = mismatch_report(np.asarray(a), e, g.output_shapes[i].dtype, case.tol)
        assert problem is None, f"output {i}: {problem}"
        checked += 1
    kinds_without_inference = {"conv", "pool2d"}
    assert checked or g.kinds() & kinds_without_inference


@pytest.mark.no_adapter
def test_every_claimed_kind_and_dtype_has_a_case():
    """So the parametrized test above covers every claim (it converts each such case)."""
    claimed = {(k, d) for k, dtypes in support.claimed_ops().items() for d in dtypes}
    covered = set()
    for case in CASES:
        g = build_case(case)
        if not unsupported_nodes(g, _Claims()):
            covered |= {(n.kind, node_dtype(g, n)) for n in g.nodes if n.kind not in ("input", "param")}
    assert not sorted((k, d.value) for k, d in claimed - covered)

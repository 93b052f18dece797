"""ONNX's backend node tests as a yardstick: rlx-cpu must pass at least as many of the
covered cases (see ``rlx_core.testing.onnx_node_tests``) as onnxruntime does, and must
never crash on one. One test, so that the sweep (about 20 s) runs once per session."""
from __future__ import annotations

from collections import Counter

import pytest

from rlx_core.testing.onnx_node_tests import load_node_cases, run_onnxruntime, run_rlx, summarize

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def test_node_tests_on_rlx_cpu_against_onnxruntime():
    cases = load_node_cases()
    rlx, ort = run_rlx(cases, "cpu"), run_onnxruntime(cases)
    assert len(rlx) == len(ort) == len(cases) > 1800
    assert sum(summarize(rlx)["*"].values()) == len(cases)

    covered = [r.covered for r in rlx]
    assert sum(covered) > 1300, f"only {sum(covered)} of {len(cases)} cases are covered"
    rlx_pass = sum(r.status == "pass" for r, c in zip(rlx, covered) if c)
    ort_pass = sum(r.status == "pass" for r, c in zip(ort, covered) if c)
    assert rlx_pass >= ort_pass, f"rlx-cpu passes {rlx_pass} covered cases, onnxruntime {ort_pass}"
    assert rlx_pass / sum(covered) > 0.97

    crashes = [f"{r.name}: {r.detail}" for r in rlx if r.covered and r.status == "error"]
    assert not crashes, "covered cases crash:\n" + "\n".join(crashes)
    # the coverage definition names everything the importer needs: nothing outside it passes
    uncovered = Counter(r.status for r in rlx if not r.covered)
    assert uncovered["pass"] == 0, uncovered

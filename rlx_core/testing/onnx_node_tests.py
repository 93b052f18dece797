"""Run ONNX's own backend node tests (about 1,900 cases over 200 op types, built in memory
by ``onnx.backend.test.loader``) on an RLX device, and on onnxruntime side by side.

Each case ends as ``pass``, ``mismatch`` (ran, wrong numbers), ``unsupported`` (the
importer or the backend's legalize declined it, at import/compile time) or ``error``
(anything else: a crash is a bug). Expected outputs and tolerances are ONNX's.
"""
from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..errors import FrontendError, UnsupportedOpError

__all__ = ["NodeCaseResult", "load_node_cases", "run_rlx", "run_onnxruntime", "summarize", "STATUSES"]

STATUSES = ("pass", "mismatch", "unsupported", "error")


@dataclass(frozen=True)
class NodeCaseResult:
    name: str
    op_type: str
    status: str
    detail: str = ""


def load_node_cases(pattern: str | None = None):
    """ONNX's node test cases that have a model and data (optionally names containing ``pattern``)."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return [c for c in cases if c.model is not None and c.data_sets
            and (pattern is None or pattern in c.name)]


def op_type_of(case) -> str:
    """The op type a node case tests (its model's single node, else the most frequent)."""
    types = [n.op_type for n in case.model.graph.node]
    return Counter(types).most_common(1)[0][0] if types else "?"


def _as_array(x) -> np.ndarray:
    """Case data comes as numpy arrays, numpy scalars or TensorProtos (for f16/bf16...)."""
    if hasattr(x, "raw_data") and hasattr(x, "data_type"):
        from onnx import numpy_helper
        return numpy_helper.to_array(x)
    return np.asarray(x)


def _compare(got: Iterable, expected: Iterable, rtol: float, atol: float) -> str:
    for i, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"output {i}: shape {g.shape} != {e.shape}"
        if e.dtype.kind in "biu" or e.dtype == bool:
            if g.dtype != e.dtype and g.dtype.kind not in "biu":
                return f"output {i}: dtype {g.dtype} != {e.dtype}"
            if not np.array_equal(g.astype(e.dtype), e):
                return f"output {i}: values differ"
            continue
        if e.dtype.kind in "fc" and not np.allclose(g.astype(np.complex128 if e.dtype.kind == "c" else np.float64),
                                                     e, rtol=rtol, atol=atol, equal_nan=True):
            err = np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64))) if e.dtype.kind == "f" else "?"
            return f"output {i}: max abs err {err}"
    return ""


def _run_case(case, run_fn: Callable) -> NodeCaseResult:
    op = op_type_of(case)
    if any(isinstance(a, (list, dict)) or a is None for inputs, outputs in case.data_sets for a in inputs + outputs):
        return NodeCaseResult(case.name, op, "unsupported", "sequence, map or optional values (RLX values are tensors)")
    try:
        for inputs, expected in case.data_sets:
            got = run_fn(case.model, [_as_array(a) for a in inputs])
            expected = [_as_array(e) for e in expected]
            why = _compare(got, expected, case.rtol, case.atol)
            if why:
                return NodeCaseResult(case.name, op, "mismatch", why)
    except (FrontendError, UnsupportedOpError) as e:
        return NodeCaseResult(case.name, op, "unsupported", str(e).splitlines()[0][:200])
    except Exception as e:  # a crash on a supported case is a bug: report it as such
        return NodeCaseResult(case.name, op, "error", f"{type(e).__name__}: {str(e)[:200]}")
    return NodeCaseResult(case.name, op, "pass")


def run_rlx(cases, device: str = "cpu", progress: Callable[[int, int], None] | None = None) -> list[NodeCaseResult]:
    from ..frontends.onnx import load_onnx
    from ..runtime import Session
    session = Session(device)

    def run(model, inputs):
        m = load_onnx(model)
        compiled = session.compile(m.graph)
        compiled.set_params(m.params)
        feeds = dict(zip(m.input_names, inputs))
        return compiled.run(feeds)

    out = []
    for i, case in enumerate(cases):
        out.append(_run_case(case, run))
        if progress:
            progress(i + 1, len(cases))
    return out


def run_onnxruntime(cases, progress: Callable[[int, int], None] | None = None) -> list[NodeCaseResult]:
    import onnxruntime as ort
    ort.set_default_logger_severity(4)

    def run(model, inputs):
        try:
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT refusing a model at load time is its "unsupported"
            raise UnsupportedOpError("onnxruntime", [(model.graph.name, str(e).splitlines()[0][:200])]) from None
        names = [i.name for i in sess.get_inputs()]
        return sess.run(None, dict(zip(names, inputs)))

    out = []
    for i, case in enumerate(cases):
        out.append(_run_case(case, run))
        if progress:
            progress(i + 1, len(cases))
    return out


def summarize(results: list[NodeCaseResult]) -> dict[str, Counter]:
    """Counts of each status per op type (plus the key ``"*"`` for all cases)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        table[r.op_type][r.status] += 1
        table["*"][r.status] += 1
    return dict(table)


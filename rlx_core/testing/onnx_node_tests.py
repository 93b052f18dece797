"""Run ONNX's own backend node tests (about 1,900 cases over 200 op types, built in memory
by ``onnx.backend.test.loader``) on an RLX device, and on onnxruntime side by side.

Each case ends as ``pass``, ``mismatch`` (ran, wrong numbers), ``unsupported`` (the
importer or the backend's legalize declined it, at import/compile time) or ``error``
(anything else: a crash is a bug). Expected outputs and tolerances are ONNX's.

A case is *covered* when the RLX importer accepts its opset (13 and newer), has a
converter for every op type in it (subgraphs included), RLX has a dtype for every
element type it uses (no uint16/uint64, float8, 4-bit or string tensors) and its data
are plain tensors (no sequences, maps or optionals). The covered cases are where RLX claims
to work; the pass rates on them, for RLX and for onnxruntime, are the yardstick.

RLX graphs are statically shaped: a case whose model reads a runtime input as a
shape (Reshape's target, TopK's k ...) is imported specialized to that input's value
(``load_onnx_for``). Random ops run in the ``ort`` rng mode, which reproduces
onnxruntime's generators.
"""
from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..errors import FrontendError, UnsupportedOpError

__all__ = ["NodeCaseResult", "load_node_cases", "run_rlx", "run_onnxruntime", "summarize", "STATUSES",
           "op_types_of", "element_types_of", "is_covered"]

STATUSES = ("pass", "mismatch", "unsupported", "error")


@dataclass(frozen=True)
class NodeCaseResult:
    name: str
    op_type: str
    status: str
    detail: str = ""
    covered: bool = False


@dataclass(frozen=True)
class NodeCase:
    """One ONNX node test: its model, data sets and the op type it tests."""

    name: str
    op_type: str
    model: object
    data_sets: list
    rtol: float
    atol: float


def load_node_cases(pattern: str | None = None) -> list[NodeCase]:
    """ONNX's node test cases that have a model and data (optionally names matching the
    regular expression ``pattern``). Function-expanded cases (``*_expanded``) are
    attributed to the op type they expand."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = [c for c in load_model_tests(kind="node") if c.model is not None and c.data_sets]
    tested = {c.name: _main_op_type(c.model) for c in raw}
    cases = []
    for c in raw:
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        op_type = tested.get(base, tested[c.name])
        if pattern is None or re.search(pattern, c.name):
            cases.append(NodeCase(c.name, op_type, c.model, c.data_sets, c.rtol, c.atol))
    return cases


def _main_op_type(model) -> str:
    types = [n.op_type for n in model.graph.node if n.op_type != "Constant"] or \
            [n.op_type for n in model.graph.node]
    return Counter(types).most_common(1)[0][0] if types else "?"


def op_types_of(graph) -> set[tuple[str, str]]:
    """Every ``(domain, op_type)`` in an ONNX graph, subgraphs included."""
    out = set()
    for node in graph.node:
        out.add((node.domain or "", node.op_type))
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out |= op_types_of(sub)
    return out


def is_covered(case: NodeCase) -> bool:
    """See the module docstring."""
    from ..frontends.onnx import CONVERTERS, MIN_OPSET, ONNX_DTYPES, max_opset
    from ..frontends import onnx_ops  # noqa: F401  (registers the converters)
    opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return (MIN_OPSET <= opset <= max_opset() and not _has_non_tensor_data(case)
            and all(domain in ("", "ai.onnx") and op in CONVERTERS for domain, op in op_types_of(case.model.graph))
            and element_types_of(case.model.graph) <= set(ONNX_DTYPES))


def element_types_of(graph) -> set[int]:
    """Every TensorProto element type an ONNX graph declares or converts to: its inputs,
    outputs and initializers, tensor attributes and dtype attributes (``Cast``'s ``to``
    ...), subgraphs included."""
    from onnx import AttributeProto
    out = {vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.output)
           if vi.type.HasField("tensor_type")}
    out |= {t.data_type for t in graph.initializer}
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == AttributeProto.TENSOR:
                out.add(attr.t.data_type)
            elif attr.name in ("to", "dtype", "output_dtype") and attr.type == AttributeProto.INT and attr.i:
                out.add(attr.i)
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                out |= element_types_of(sub)
    return out


def _has_non_tensor_data(case: NodeCase) -> bool:
    return any(isinstance(a, (list, dict)) or a is None for inputs, outputs in case.data_sets
               for a in list(inputs) + list(outputs))


def _as_array(x) -> np.ndarray:
    """Case data comes as numpy arrays, numpy scalars or TensorProtos (for f16/bf16...)."""
    if hasattr(x, "raw_data") and hasattr(x, "data_type"):
        from onnx import numpy_helper
        return numpy_helper.to_array(x)
    return np.asarray(x)


def _compare(got: Iterable, expected: Iterable, rtol: float, atol: float) -> str:
    """Why ``got`` differs from ``expected`` (ONNX's assert_allclose rule), or ''."""
    got, expected = list(got), list(expected)
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        e, g = np.asarray(e), np.asarray(g)
        if g.shape != e.shape:
            return f"output {i}: shape {g.shape} != {e.shape}"
        if e.dtype.kind not in "fcV":  # integers, bools and strings compare exactly
            if g.dtype != e.dtype and e.dtype.kind in "biu":
                return f"output {i}: dtype {g.dtype} != {e.dtype}"
            if not np.array_equal(g, e):
                return f"output {i}: values differ at {int(np.sum(g != e))} of {e.size} positions"
            continue
        wide = np.complex128 if e.dtype.kind == "c" else np.float64
        if g.dtype != e.dtype:
            return f"output {i}: dtype {g.dtype} != {e.dtype}"
        g, e = g.astype(wide), e.astype(wide)
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            diff = np.abs(g - e)
            return f"output {i}: max abs err {np.nanmax(np.where(np.isnan(diff), 0, diff)):.3g}"
    return ""


def _run_case(case: NodeCase, run_fn: Callable, covered: bool) -> NodeCaseResult:
    def result(status, detail=""):
        return NodeCaseResult(case.name, case.op_type, status, detail, covered)
    if _has_non_tensor_data(case):
        return result("unsupported", "sequence, map or optional values (RLX values are tensors)")
    try:
        for inputs, expected in case.data_sets:
            with np.errstate(all="ignore"):
                got = run_fn(case.model, [_as_array(a) for a in inputs])
            why = _compare(got, [_as_array(e) for e in expected], case.rtol, case.atol)
            if why:
                return result("mismatch", why)
    except (FrontendError, UnsupportedOpError) as e:
        return result("unsupported", " ".join(str(e).split())[:240])
    except Exception as e:  # a crash on a supported case is a bug: report it as such
        return result("error", f"{type(e).__name__}: {' '.join(str(e).split())[:240]}")
    return result("pass")


def _run_all(cases, run_fn, progress) -> list[NodeCaseResult]:
    out = []
    for i, case in enumerate(cases):
        out.append(_run_case(case, run_fn, is_covered(case)))
        if progress:
            progress(i + 1, len(cases))
    return out


def run_rlx(cases, device: str = "cpu", progress: Callable[[int, int], None] | None = None) -> list[NodeCaseResult]:
    """Import each case (specialized to its inputs where needed), compile it for
    ``device`` with the ``ort`` rng mode, run it and compare."""
    from ..frontends.onnx import load_onnx_for
    from ..rng import RngOptions
    from ..runtime import CompileOptions, Session
    session = Session(device, options=CompileOptions(rng=RngOptions(mode="ort")))

    def run(model, inputs):
        names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        feeds = dict(zip(names, inputs))
        m = load_onnx_for(model, feeds)
        compiled = session.compile(m.graph)
        compiled.set_params(m.params)
        return compiled.run({n: feeds[n] for n in m.input_names})

    return _run_all(cases, run, progress)


def run_onnxruntime(cases, progress: Callable[[int, int], None] | None = None) -> list[NodeCaseResult]:
    """The same cases on onnxruntime's CPU provider (a model it refuses to load is its
    ``unsupported``)."""
    import onnxruntime as ort
    ort.set_default_logger_severity(4)

    def run(model, inputs):
        try:
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception as e:
            raise UnsupportedOpError("onnxruntime", [(model.graph.name, " ".join(str(e).split())[:200])]) from None
        names = [i.name for i in sess.get_inputs()]
        return sess.run(None, dict(zip(names, inputs)))

    return _run_all(cases, run, progress)


def summarize(results: list[NodeCaseResult]) -> dict[str, Counter]:
    """Counts of each status per op type, plus ``"*"`` (all cases) and ``"covered"``
    (the covered cases)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        table[r.op_type][r.status] += 1
        table["*"][r.status] += 1
        if r.covered:
            table["covered"][r.status] += 1
    return dict(table)

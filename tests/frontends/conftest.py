"""Helpers for the ONNX importer tests (the ``ox`` fixture): build models with
onnx.helper, run them on rlx-cpu (through the importer) and on onnxruntime."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from rlx_core import CompileOptions, RngOptions, Session  # noqa: E402
from rlx_core.frontends.onnx import load_onnx  # noqa: E402


def make_model(nodes, inputs, outputs, *, opset=18, initializers=(), name="test"):
    """A model from nodes and ``(name, elem_type, dims)`` input/output triples, checked by
    ``onnx.checker``."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(model)
    return model


def run_onnxruntime(model, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_rlx(model, feeds: dict, *, rng_mode="philox", **load_kwargs) -> list[np.ndarray]:
    """Import ``model``, compile it for rlx-cpu and run it on ``feeds``."""
    imported = load_onnx(model, **load_kwargs)
    compiled = Session("cpu", options=CompileOptions(rng=RngOptions(mode=rng_mode))).compile(imported.graph)
    compiled.set_params(imported.params)
    return list(compiled.run({n: feeds[n] for n in imported.input_names}))


def assert_matches_onnxruntime(model, feeds: dict, *, rtol=1e-4, atol=1e-4, **load_kwargs):
    """rlx-cpu's outputs equal onnxruntime's (dtypes, shapes, values within tolerance)."""
    expected = run_onnxruntime(model, feeds)
    got = run_rlx(model, feeds, **load_kwargs)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, f"output {i}: {g.dtype}{g.shape} vs {e.dtype}{e.shape}"
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {i}")


@pytest.fixture(scope="session")
def ox():
    """The helpers above: ``ox.make_model``, ``ox.run_rlx``, ``ox.run_onnxruntime``,
    ``ox.assert_matches_onnxruntime``."""
    return SimpleNamespace(make_model=make_model, run_rlx=run_rlx, run_onnxruntime=run_onnxruntime,
                           assert_matches_onnxruntime=assert_matches_onnxruntime)

"""The backend conformance suite. A plugin runs it with a test module like::

    from rlx_core.testing import ConformanceSuite

    class TestMyDevice(ConformanceSuite):
        device = "mydevice"

(``pytest --rlx-device=NAME`` overrides ``device``). Every case is compiled on the
backend and compared with the reference interpreter, twice with different data (so
stale buffers show), once with non-contiguous inputs. A case the backend does not
support must be rejected by legalize at compile time -- it is then reported as a
skip naming the reason, never counted as a pass.
"""
from __future__ import annotations

import numpy as np
import pytest

from ..errors import InputError, UnsupportedOpError
from ..passes.legalize import unsupported_nodes
from ..reference import evaluate
from ..runtime import Session, registry
from .cases import Case, build_case, make_data
from .compare import assert_close

__all__ = ["ConformanceSuite", "check_case"]


def check_case(session: Session, case: Case) -> None:
    """Compile ``case`` on ``session``'s backend and compare it with the reference."""
    g = build_case(case)
    bad = unsupported_nodes(g, session.backend, registry().op_kernels(session.backend.name))
    if bad:
        with pytest.raises(UnsupportedOpError):
            session.compile(g)
        pytest.skip(f"rejected at compile time by legalize: {bad[0][1]}")
    compiled = session.compile(g)
    for variant in (0, 1):
        inputs, params = make_data(case, variant)
        expected = evaluate(g, inputs, params)
        for name, value in params.items():
            compiled.set_param(name, value)
        feeds = inputs if variant == 0 else {k: _strided(v) for k, v in inputs.items()}
        got = compiled.run(feeds)
        assert len(got) == len(expected), f"{len(got)} outputs, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(got, expected)):
            assert_close(np.asarray(a), e, g.output_shapes[i].dtype, case.tol,
                         what=f"{case.id} output {i} (data set {variant})")


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values as a non-contiguous view (every other element of a larger array)."""
    if a.ndim == 0 or a.size < 2:
        return a
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    big[..., ::2] = a
    view = big[..., ::2]
    assert not view.flags.c_contiguous
    return view


class ConformanceSuite:
    """Subclass with ``device = "<label>"``; see the module docstring."""

    device: str | None = None

    def test_case(self, rlx_session, rlx_case):
        check_case(rlx_session, rlx_case)

    def test_rejects_bad_inputs(self, rlx_session):
        from ..ir import Graph
        g = Graph("errors")
        x = g.input("x", (2, 3))
        g.set_outputs([g.relu(x)])
        c = rlx_session.compile(g)
        with pytest.raises(InputError, match="expected dims"):
            c.run({"x": np.zeros((3, 2), np.float32)})
        with pytest.raises(InputError, match="expected dtype"):
            c.run({"x": np.zeros((2, 3), np.float64)})
        with pytest.raises(InputError, match="missing input"):
            c.run({})
        with pytest.raises(InputError, match="no input named"):
            c.run({"x": np.zeros((2, 3), np.float32), "y": 1})

    def test_out_buffers(self, rlx_session):
        from ..ir import Graph
        g = Graph("out")
        x = g.input("x", (4,))
        g.set_outputs([g.exp(x), g.neg(x)])
        c = rlx_session.compile(g)
        x_val = np.arange(4, dtype=np.float32)
        out = [np.empty(4, np.float32), np.empty(4, np.float32)]
        res = c.run({"x": x_val}, out=out)
        assert res[0] is out[0] and res[1] is out[1]
        assert_close(out[0], np.exp(x_val), "f32")
        assert_close(out[1], -x_val, "f32")

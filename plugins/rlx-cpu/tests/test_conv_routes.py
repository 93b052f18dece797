"""Every convolution route computes what the reference does, on every conv conformance
case where it applies (the route is normally chosen by measurement; here it is forced)."""
import numpy as np
import pytest

from rlx_core import DType, Graph, Session, evaluate
from rlx_core.testing.cases import all_cases
from rlx_core.testing.compare import assert_close
from rlx_core.testing.suite import check_case

from rlx_cpu import cache, load
from rlx_cpu.kernels import conv

CASES = all_cases(["conv"])


@pytest.fixture
def stored(monkeypatch, tmp_path):
    """The conv routes' decisions file, in a folder of the test's own."""
    monkeypatch.setattr(cache, "kernel_dir", lambda: tmp_path)
    decisions = cache.Decisions()
    monkeypatch.setattr(conv, "_decisions", decisions)
    return decisions


def _force(monkeypatch, route):
    """Decide ``route`` wherever it is one of a geometry's routes (else the first route),
    stored nowhere."""
    monkeypatch.setattr(conv, "_fastest_route", lambda geometry, routes: route if route in routes else routes[0])
    # rows: its two-core race decided for one core (undecided, rows2 serves)
    monkeypatch.setattr(conv._decisions, "get",
                        lambda key: "rows" if route == "rows" and key.endswith(":two-cores") else None)
    monkeypatch.setattr(conv._decisions, "set", lambda key, value, provisional=False: None)


@pytest.mark.parametrize("route", ["channels_last", "nchw", "direct", "tiled", "rows", "rows2"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_route_matches_the_reference(monkeypatch, route, case):
    _force(monkeypatch, route)
    check_case(Session("cpu"), case)


@pytest.mark.parametrize("route", ["channels_last", "nchw", "direct", "tiled", "rows", "rows2"])
def test_fused_conv_bias_relu_on_every_route(monkeypatch, route):
    _force(monkeypatch, route)
    dtype = DType.F64 if route == "direct" else DType.F32  # direct: float64 only (float32 has rows)
    g = Graph("conv_relu")
    x = g.input("x", (2, 3, 9, 7), dtype)
    w = g.param("w", (5, 3, 3, 2), dtype)
    b = g.param("b", (5,), dtype)
    strides = (1, 2) if route == "tiled" else (1, 1)  # tiled: offered where rows is not
    g.set_outputs([g.relu(g.conv(x, w, b, strides=strides, pads=(1, 0, 2, 1), dilations=(1, 2)))])
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((5, 3, 3, 2)).astype(dtype.np),
              "b": rng.standard_normal(5).astype(dtype.np)}
    inputs = {"x": rng.standard_normal((2, 3, 9, 7)).astype(dtype.np)}
    compiled = Session("cpu").compile(g)
    compiled.set_params(params)
    assert conv.conv_route(g.nodes[-2], g) == route
    for _ in range(2):
        assert_close(compiled.run(inputs)[0], evaluate(g, inputs, params)[0], dtype)


def test_routes_are_measured_once_and_stored(monkeypatch, stored):
    g = Graph("conv")
    x = g.input("x", (1, 3, 16, 16))
    g.set_outputs([g.conv(x, g.param("w", (4, 3, 3, 3)), pads=(1, 1, 1, 1))])
    node = g.nodes[-1]
    route = conv.conv_route(node, g)
    (measured,) = (v.lstrip("~") for v in stored._values.values())
    # rows2 serves where rows won, until the background race of the two is stored
    assert route == ("rows2" if measured == "rows" else measured) and route in conv.ROUTES
    monkeypatch.setattr(conv, "_fastest_route", lambda *_: pytest.fail("measured twice"))
    assert conv.conv_route(node, g) == route


def test_a_gemm_route_counts_with_its_two_thread_time(monkeypatch):
    from rlx_cpu import threads
    if threads.blas_threads() is None:
        pytest.skip("numpy's BLAS is not a multi-threaded OpenBLAS")
    seen = {}

    def fixed(ways, control, rounds):  # what a quiet two-core machine measures for a 16->32 conv
        seen.update(ways)
        medians = {"rows": 3.0, "nchw": 4.0, "nchw openblas": 2.0, "channels_last": 5.0,
                   "channels_last openblas": 4.5}
        return {name: [medians[name]] * rounds for name in ways}
    monkeypatch.setattr(threads, "measure", fixed)
    quiet = load.MachineLoad("/nonexistent")  # no /proc: quiet
    monkeypatch.setattr(load, "machine_load", lambda: quiet)
    g = Graph("conv")
    x = g.input("x", (1, 16, 16, 16))
    g.set_outputs([g.conv(x, g.param("w", (32, 16, 3, 3)), pads=(1, 1, 1, 1))])
    geometry = conv._Geometry(g.nodes[-1], g)
    assert conv._fastest_route(geometry, geometry.routes()) == "nchw"
    assert seen["nchw"].threads == 1 and seen["nchw openblas"].threads == threads.OWN_THREADS
    assert "rows openblas" not in seen and "rows2" not in seen  # no GEMM: one way; rows2: raced apart
    seen.clear()
    for _ in range(2):  # two stalls in quick succession: loaded, where two-thread GEMMs stall
        quiet.report_stall()
    assert conv._fastest_route(geometry, geometry.routes()) == "rows"
    assert not any(name.endswith("openblas") for name in seen)

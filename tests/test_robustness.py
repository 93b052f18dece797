"""Issue 20: misuse that used to crash with a non-RLX exception, or went silently wrong.

* item 6: a backend returning outputs of the wrong count, dims or dtype is caught by
  ``CompiledGraph.run`` (``BackendOutputError``; the fallback side is in
  ``tests/select/test_output_check.py``);
* item 7: Python scalars that do not fit the operand's dtype raise ``DTypeError`` (``x_u8 -
  1`` is ``sub(x, 1)``: 1 fits u8 and the subtraction wraps, as in numpy; ``x_u8 + (-1)``
  does not fit);
* item 10: plans that cannot fit the device raise ``ResourceError`` at compile time,
  naming the node and the bytes, on cpu, tpu (XLA:CPU) and gpu;
* item 11: wrong argument types raise an RlxError that is also a TypeError and names
  the argument;
* item 17: ``run(out=...)`` with fresh arrays costs no recompile-like price.
"""
import importlib.util
import re

import numpy as np
import pytest

from rlx_core import Graph, Session, Shape
from rlx_core.errors import (ArgumentTypeError, BackendOutputError, DTypeError, InputError, InputTypeError,
                             ResourceError, RlxError)
from rlx_core.ir import all_schemas
from rlx_core.runtime import Availability, Backend, ExecutableGraph
from rlx_core.runtime.options import CompileOptions
from rlx_core.runtime.registry import registry
from rlx_core.runtime.session import compile_graph


def _small():
    g = Graph("small")
    x = g.input("x", Shape((2, 3), "f32"))
    g.set_outputs([x * 2.0, g.sum(x, 1)], names=["y", "s"])
    return g


@pytest.fixture
def compiled():
    return Session("cpu").compile(_small())


X = np.arange(6, dtype=np.float32).reshape(2, 3)


# --- item 6: backend outputs are checked against the graph ------------------------------------
class _Lying(ExecutableGraph):
    def __init__(self, graph, lie):
        self.graph, self.lie = graph, lie

    def set_param(self, name, value):
        pass

    def run(self, inputs, out=None):
        x = inputs["x"]
        good = [x * 2, x.sum(1)]
        return self.lie(good)


class _LyingBackend(Backend):
    name, device = "lying", "cpu"

    def __init__(self, lie):
        self.lie = lie

    def is_available(self):
        return Availability(True, "test")

    def supported_ops(self):
        return {kind: None for kind in all_schemas()}

    def compile(self, graph, options):
        return _Lying(graph, self.lie)


@pytest.mark.parametrize("lie, what", [
    (lambda good: [good[0].T, good[1]], r"output 0 \(y\).*\[3, 2\] f32.*declares \[2, 3\] f32"),
    (lambda good: [good[0].astype(np.float64), good[1]], r"output 0 \(y\).*\[2, 3\] f64.*declares \[2, 3\] f32"),
    (lambda good: [good[0], good[1][:1]], r"output 1 \(s\).*\[1\] f32.*declares \[2\] f32"),
    (lambda good: good[:1], r"returned 1 output\(s\), the graph has 2"),
    (lambda good: [good[0], "nope"], r"output 1 \(s\).*str"),
])
def test_backend_outputs_are_checked(lie, what):
    c = compile_graph(_LyingBackend(lie), _small(), CompileOptions())
    with pytest.raises(BackendOutputError, match=what) as info:
        c.run({"x": X})
    assert "backend 'lying'" in str(info.value)


def test_honest_outputs_pass_the_check():
    c = compile_graph(_LyingBackend(lambda good: good), _small(), CompileOptions())
    np.testing.assert_array_equal(c.run({"x": X})["y"], X * 2)


# --- item 7: scalars that do not fit the operand's dtype ----------------------------------------
def _value(dtype, dims=(2,)):
    g = Graph("scalars")
    return g.input("x", Shape(dims, dtype))


@pytest.mark.parametrize("dtype, build, why", [
    ("f32", lambda x: x + None, "NoneType"),
    ("f32", lambda x: x + "a", "str"),
    ("u8", lambda x: x + (-1), "-1 does not fit u8"),   # (x - 1 is sub(x, 1): 1 fits u8, and wraps as numpy does)
    ("u8", lambda x: x - (-1), "-1 does not fit u8"),
    ("i8", lambda x: x - 128, "128 does not fit i8"),
    ("u8", lambda x: x + 300, "300 does not fit u8"),
    ("u8", lambda x: x * 1.5, "1.5 does not fit u8"),
    ("i32", lambda x: x + 2 ** 40, "does not fit i32"),
    ("i64", lambda x: x + float("nan"), "nan does not fit i64"),
    ("f16", lambda x: x * 1e6, "does not fit f16"),
    ("f32", lambda x: x + 1e40, "does not fit f32"),
    ("f32", lambda x: x + 1j, "does not fit f32"),
    ("bool", lambda x: x.graph.where(x, x, 2), "2 does not fit bool"),
    ("u8", lambda x: x < -1, "-1 does not fit u8"),
])
def test_scalars_that_do_not_fit_raise_dtype_error(dtype, build, why):
    x = _value(dtype)
    with pytest.raises(DTypeError, match=why):
        build(x)


@pytest.mark.parametrize("dtype, build", [
    ("f32", lambda x: x + 1),
    ("f32", lambda x: x + float("inf")),
    ("f32", lambda x: x * float("nan")),
    ("f16", lambda x: x * 0.1),
    ("u8", lambda x: x + 255),
    ("u8", lambda x: 1 - x),
    ("u8", lambda x: x * 2.0),
    ("i8", lambda x: x + (-128)),
    ("i64", lambda x: x + 2 ** 40),
    ("bool", lambda x: x.graph.where(x, x, True)),
    ("bool", lambda x: x.graph.where(x, 0, x)),
    ("c64", lambda x: x + 1j),
])
def test_scalars_that_fit_still_build(dtype, build):
    x = _value(dtype)
    assert build(x).dtype == x.dtype


# --- item 10: plans that cannot fit the device ----------------------------------------------------
def _huge_input():
    g = Graph("huge-input")
    g.set_outputs([g.input("x", Shape((2 ** 20, 2 ** 20), "f32")) * 2.0])
    return g, r"%0 input", 2 ** 42


def _huge_expand():
    g = Graph("huge-expand")
    x = g.input("x", Shape((1,), "f32"))
    g.set_outputs([g.expand(x, (2 ** 40,))])
    return g, r"%1 expand", 2 ** 42


def _huge_arange():
    g = Graph("huge-arange")
    g.set_outputs([g.arange(2 ** 40, dtype="i32")])
    return g, r"%0 arange", 2 ** 42


def _huge_pad():
    g = Graph("huge-pad")
    x = g.input("x", Shape((4,), "f32"))
    g.set_outputs([g.pad(x, [(0, 2 ** 40)])])
    return g, r"%1 pad", 4 * (2 ** 40 + 4)


HUGE = [_huge_input, _huge_expand, _huge_arange, _huge_pad]


@pytest.fixture(params=["cpu", "tpu", "gpu"])
def device(request, fresh_registry):
    """cpu, tpu (on XLA:CPU unless RLX_TPU_PLATFORM says otherwise) and gpu, where installed."""
    name = request.param
    if name == "tpu":
        return request.getfixturevalue("tpu_device")
    plugin = {"cpu": "rlx_cpu", "gpu": "rlx_wgpu"}[name]
    if importlib.util.find_spec(plugin) is None:
        pytest.skip(f"the {plugin} plugin is not installed")
    if not registry().is_available(name):
        pytest.skip(f"device {name} is not available here")
    return name


@pytest.mark.parametrize("build", HUGE, ids=lambda f: f.__name__)
def test_plans_that_cannot_fit_raise_resource_error(device, build):
    graph, node, nbytes = build()
    with pytest.raises(ResourceError) as info:
        Session(device).compile(graph)
    text = str(info.value)
    assert isinstance(info.value, MemoryError) and node in text and f"{nbytes} bytes" in text, text
    assert f"device {device}" in text


def test_the_plan_counts_what_is_live_together():
    from rlx_core.runtime.memory_plan import device_memory_bytes, plan_memory_bytes
    g = Graph("chain")
    x = g.input("x", Shape((1024,), "f32"))
    y = x
    for _ in range(10):
        y = g.exp(y)  # each value dies once the next is computed
    g.set_outputs([y])
    peak, node = plan_memory_bytes(g)
    assert 2 * 4096 <= peak <= 3 * 4096, peak
    assert device_memory_bytes(registry().backend("cpu")) > 2 ** 30


def test_a_device_smaller_than_the_peak_is_named(monkeypatch):
    g = Graph("two")
    x = g.input("x", Shape((1024,), "f32"))
    g.set_outputs([g.exp(x) + g.tanh(x)])
    backend = registry().backend("cpu")
    monkeypatch.setattr(type(backend), "memory_capacity", lambda self: 10_000)
    with pytest.raises(ResourceError, match=r"needs 16384 bytes .*live at %3 add.*device cpu has 10000 bytes"):
        Session("cpu").compile(g)


# --- item 11: wrong argument types ------------------------------------------------------------------
@pytest.mark.parametrize("call, argument", [
    (lambda c: c.run(5), "inputs"),
    (lambda c: c.run(["x"]), "inputs"),
    (lambda c: c.run([("x",)]), "inputs"),
    (lambda c: c.run([(["x"], X)]), "inputs"),
    (lambda c: c.run({"x": X}, out=5), "out"),
    (lambda c: c.run({"x": X}, out=[5, 6]), "out"),
    (lambda c: c.run_typed(5), "inputs"),
    (lambda c: c.run_typed({"x": 5}), "inputs"),
    (lambda c: c.run_typed({"x": (5, "f32")}), "inputs"),
])
def test_run_argument_types(compiled, call, argument):
    with pytest.raises(InputTypeError, match=re.escape(argument)) as info:
        call(compiled)
    assert isinstance(info.value, TypeError) and isinstance(info.value, InputError)


def test_unhashable_names_are_input_errors(compiled):
    with pytest.raises(InputError, match=r"no input named \['x'\]"):
        compiled.set_input(["x"], X)


def test_run_typed_bad_dtype_is_an_input_error(compiled):
    with pytest.raises(RlxError, match="unknown dtype"):
        compiled.run_typed({"x": (X.tobytes(), "f99")})


@pytest.mark.parametrize("call, argument", [
    (lambda: Session("cpu").compile("graph"), "graph"),
    (lambda: Shape(dims=5), "dims"),
    (lambda: Shape("23"), "dims"),
    (lambda: _small().set_outputs(5), "values"),
    (lambda: _small().set_outputs([5]), "values"),
])
def test_api_argument_types(call, argument):
    with pytest.raises(ArgumentTypeError, match=re.escape(argument)) as info:
        call()
    assert isinstance(info.value, TypeError) and isinstance(info.value, RlxError)


# --- item 17: fresh out= arrays ---------------------------------------------------------------------
def test_fresh_out_arrays_do_not_regenerate_the_run(monkeypatch):
    """Each run generated and compiled a new straight-line function for a new set of out=
    arrays (~75x a reused set's time); now a set is specialized only once it is reused,
    and the number of such builds is bounded however many sets a caller cycles through."""
    from rlx_cpu import executable
    generated = []
    real = executable._Runs
    monkeypatch.setattr(executable, "_Runs", lambda *a, **k: generated.append(1) or real(*a, **k))
    c = Session("cpu").compile(_small())
    base = len(generated)
    for i in range(200):
        out = [np.empty((2, 3), np.float32), np.empty(2, np.float32)]
        res = c.run({"x": X + i}, out=out)
        assert res[0] is out[0]
        np.testing.assert_array_equal(out[0], (X + i) * 2)
        np.testing.assert_array_equal(out[1], (X + i).sum(1))
    assert len(generated) == base, f"{len(generated) - base} run functions generated for fresh out= arrays"
    ring = [[np.empty((2, 3), np.float32), np.empty(2, np.float32)] for _ in range(7)]
    for i in range(700):  # more buffer sets in rotation than the executable keeps
        out = ring[i % 7]
        c.run({"x": X + i}, out=out)
        np.testing.assert_array_equal(out[0], (X + i) * 2)
    assert len(generated) - base <= 8, len(generated) - base
    reused = ring[0]
    for i in range(5):
        c.run({"x": X - i}, out=reused)
        np.testing.assert_array_equal(reused[1], (X - i).sum(1))

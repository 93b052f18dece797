"""Session / CompiledGraph: the user-facing contract and its errors, on the CPU backend."""
import array
import threading

import ml_dtypes
import numpy as np
import pytest

from rlx_core import CompileCache, CompileOptions, Graph, PrecisionPolicy, Session, Shape
from rlx_core.errors import InputError, ParamError, RlxError


def _graph():
    g = Graph("s")
    x = g.input("x", (2, 3))
    b = g.param("b", (3,))
    g.set_outputs([g.relu(x + b), g.neg(b)], names=["y", "nb"])
    return g


@pytest.fixture
def compiled():
    c = Session("cpu").compile(_graph())
    c.set_param("b", np.array([1, -2, 3], np.float32))
    return c


def test_run_mapping_pairs_and_names(compiled):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    out = compiled.run({"x": x})
    np.testing.assert_array_equal(out[0], np.maximum(x + [1, -2, 3], 0))
    np.testing.assert_array_equal(out["nb"], [-1, 2, -3])
    assert out.names == ["y", "nb"] and set(out.as_dict()) == {"y", "nb"}
    np.testing.assert_array_equal(compiled.run([("x", x)])[0], out[0])
    np.testing.assert_array_equal(compiled({"x": x})["y"], out[0])


def test_set_input_stages_until_the_next_run(compiled):
    compiled.set_input("x", np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(compiled.run()[0], [[2, 0, 4]] * 2)
    with pytest.raises(InputError, match="missing input"):
        compiled.run()


def test_input_errors_are_precise(compiled):
    with pytest.raises(InputError, match=r"input 'x': expected dims \[2, 3\], got \[3, 2\]"):
        compiled.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(InputError, match=r"expected dtype f32, got f64 \(convert with .astype\('float32'\)\)"):
        compiled.run({"x": np.zeros((2, 3))})
    with pytest.raises(InputError, match=r"missing input\(s\) \['x'\].*\[2, 3\] f32"):
        compiled.run({})
    with pytest.raises(InputError, match="has no input named 'z'; its inputs: x"):
        compiled.run({"x": np.zeros((2, 3), np.float32), "z": 0})
    with pytest.raises(InputError, match="cannot convert"):
        compiled.run({"x": "hello"})


def test_param_errors_are_precise(compiled):
    with pytest.raises(ParamError, match=r"param 'b': expected dims \[3\], got \[4\]"):
        compiled.set_param("b", np.zeros(4, np.float32))
    with pytest.raises(ParamError, match="has no param named 'w'; its params: b"):
        compiled.set_param("w", np.zeros(3, np.float32))
    fresh = Session("cpu").compile(_graph())
    with pytest.raises(ParamError, match=r"never set; call set_param"):
        fresh.run({"x": np.zeros((2, 3), np.float32)})


def test_seed_quickstart_with_flat_buffers():
    """The seed's quickstart, transliterated: a [4, 2] param and a [1, 4] input given as
    flat buffers of exactly the declared element count, read in C order."""
    g = Graph("hello")
    x = g.input("x", Shape((1, 4), "f32"))
    w = g.param("w", Shape((4, 2), "f32"))
    g.set_outputs([g.matmul(x, w, Shape((1, 2), "f32"))])
    c = Session("cpu").compile(g)
    c.set_param("w", np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0], np.float32))
    np.testing.assert_array_equal(c.run([("x", [1.0, 2.0, 3.0, 4.0])])[0], [[4, 6]])
    c.set_param("w", [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    for flat in (array.array("f", [1, 2, 3, 4]), memoryview(np.array([1, 2, 3, 4], np.float32)),
                 np.array([1, 2, 3, 4], np.float32)):
        np.testing.assert_array_equal(c.run({"x": flat})[0], [[4, 6]])


def test_flat_buffers_must_match_count_and_dtype(compiled):
    with pytest.raises(InputError, match=r"expected dims \[2, 3\], got \[5\] \(a flat buffer must hold exactly 6"):
        compiled.run({"x": np.zeros(5, np.float32)})
    with pytest.raises(InputError, match=r"expected dims \[2, 3\], got \[6, 1\]"):
        compiled.run({"x": np.zeros((6, 1), np.float32)})
    with pytest.raises(InputError, match="expected dtype f32, got f64"):  # a typed buffer is never cast
        compiled.run({"x": array.array("d", range(6))})
    with pytest.raises(ParamError, match=r"expected dims \[3\], got \[6\]"):
        compiled.set_param("b", [0.0] * 6)


def test_lists_are_converted_to_the_declared_dtype(compiled):
    compiled.set_param("b", [0, 0, 0])
    np.testing.assert_array_equal(compiled.run({"x": [[1, -1, 2]] * 2})[0], [[1, 0, 2]] * 2)


def test_params_are_copied_not_aliased(compiled):
    b = np.array([1, 1, 1], np.float32)
    compiled.set_param("b", b)
    b[:] = 100
    np.testing.assert_array_equal(compiled.run({"x": np.zeros((2, 3), np.float32)})["nb"], [-1, -1, -1])


def test_typed_io_widens_and_narrows():
    g = Graph("t")
    x = g.input("x", (4,), "f32")
    w = g.param("w", (4,), "bf16")
    g.set_outputs([x * g.cast(w, "f32"), g.cast(x, "f16")])
    c = Session("cpu").compile(g)
    w16 = np.array([1, 2, 3, 4], np.float16)
    c.set_param_typed("w", w16.tobytes(), "f16")  # f16 bytes into a bf16 param
    x16 = np.array([0.5, 1, 1.5, 2], np.float16)
    (y, dty), (h, dth) = c.run_typed({"x": (x16.tobytes(), "f16")})
    assert (dty, dth) == ("f32", "f16")
    np.testing.assert_array_equal(np.frombuffer(y, np.float32), [0.5, 2, 4.5, 8])
    np.testing.assert_array_equal(np.frombuffer(h, np.float16), x16)
    with pytest.raises(ParamError, match="6 bytes of f32 is 1.5 values, expected 4"):
        c.set_param_typed("w", b"123456", "f32")
    c.set_param("w", np.ones(4, ml_dtypes.bfloat16))


def test_out_buffers_are_validated(compiled):
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(InputError, match="out= has 1 arrays"):
        compiled.run({"x": x}, out=[np.empty((2, 3), np.float32)])
    with pytest.raises(InputError, match=r"out\[1\] \(nb\) must be a writable numpy array of \[3\] f32"):
        compiled.run({"x": x}, out=[np.empty((2, 3), np.float32), np.empty(3, np.float64)])


def test_repr_and_introspection(compiled):
    assert compiled.input_names == ["x"] and compiled.param_names == ["b"]
    assert "via cpu" in repr(compiled) and "Session(cpu" in repr(Session("cpu"))
    assert compiled.output_shapes == [Shape((2, 3)), Shape((3,))]


def test_precision_policies_keep_boundaries_and_change_compute():
    from rlx_core.passes import apply_precision
    g = Graph("p")
    x = g.input("x", (4, 8))
    y = g.exp(g.tanh(x) * 2.0)
    g.set_outputs([y])
    for policy, inner in [("f16", "f16"), ("bf16", "bf16"), ("f32", "f32")]:
        low = apply_precision(g, policy)
        assert low.output_shapes == g.output_shapes and low.input_nodes[0].attrs["dtype"].value == "f32"
        tanh = next(n for n in low if n.kind == "tanh")
        assert tanh.shape.dtype.value == inner
    amp = apply_precision(g, "amp-bf16")
    assert next(n for n in amp if n.kind == "exp").shape.dtype.value == "f32"  # f32 list
    x_val = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    ref = Session("cpu").compile(g).run({"x": x_val})[0]
    for policy, tol in [("f16", 2e-2), ("bf16", 1e-1), ("amp-f16", 2e-2), ("amp-conservative", 1e-6)]:
        got = Session("cpu", precision=policy).compile(g).run({"x": x_val})[0]
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    with pytest.raises(RlxError, match="unknown precision policy 'f8'"):
        PrecisionPolicy.of("f8")


def test_compile_cache_hits_keys_eviction_and_threads():
    cache = CompileCache(capacity=2)
    s = Session("cpu")
    a = cache.get_or_compile(s, _graph())
    assert cache.get_or_compile(s, _graph()) is a and cache.hits == 1
    assert cache.get_or_compile(s, _graph(), CompileOptions(precision="f16")) is not a
    g2 = Graph("other")
    g2.set_outputs([g2.exp(g2.input("x", (1,)))])
    cache.get_or_compile(s, g2)
    assert len(cache) == 2 and cache.misses == 3
    assert cache.get_or_compile(s, _graph()) is not a  # evicted (least recently used)

    fresh = CompileCache()
    results = []
    threads = [threading.Thread(target=lambda: results.append(fresh.get_or_compile("cpu", _graph())))
               for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len({id(r) for r in results}) == 1 and fresh.misses == 1 and fresh.hits == 7


def test_compile_cache_with_an_automatic_session(monkeypatch):
    """``Session()`` picks per graph; the cache keys on the device that pick chose."""
    monkeypatch.setenv("RLX_DEVICE", "cpu")
    cache = CompileCache()
    a = cache.get_or_compile(Session(), _graph())
    assert a.device == "cpu" and cache.get_or_compile(Session("cpu"), _graph()) is a and cache.hits == 1


def test_trace_writes_a_chrome_trace(tmp_path, monkeypatch, caplog):
    import json
    import logging
    path = tmp_path / "trace.json"
    monkeypatch.setenv("RLX_TRACE_FILE", str(path))
    c = Session("cpu").compile(_graph(), CompileOptions(trace=True))
    c.set_param("b", np.zeros(3, np.float32))
    with caplog.at_level(logging.INFO, logger="rlx.trace"):
        c.run({"x": np.zeros((2, 3), np.float32)})
        c.run({"x": np.zeros((2, 3), np.float32)})
    from rlx_core.runtime.trace import flush_traces
    flush_traces()  # the writer buffers events (written at exit, or on a size/time bound)
    events = json.loads(path.read_text())
    assert {e["name"] for e in events} >= {"%2 add", "%3 relu", "%4 neg"}
    assert len(events) == 6 and all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    assert "s on cpu: 3 ops" in caplog.text

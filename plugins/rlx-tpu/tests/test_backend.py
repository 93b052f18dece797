"""The tpu backend beyond op semantics: platform choice and availability, the program
cache, params on the device, inputs and outputs of every kind, control flow compiled
into the XLA program, custom op lowerings, legalization, options and calibration."""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

from rlx_core import Attr, CompileOptions, CustomOp, Graph, Session, evaluate, register_custom_op
from rlx_core.errors import InputError, PolicyError, UnsupportedOpError
from rlx_core.ir import all_schemas
from rlx_core.ir.dtypes import FLOATS
from rlx_core.passes.legalize import unsupported_nodes
from rlx_core.passes.precision import apply_precision
from rlx_core.runtime import hookimpl, register_backends, registry
from rlx_core.testing import assert_close
from rlx_tpu import platform
from rlx_tpu.backend import TpuBackend
from rlx_tpu.lowering import LOWERINGS

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PLATFORM = platform.requested_platform()
PLUGIN_ROOT = Path(__file__).resolve().parents[1]
ON_DEVICE = CompileOptions(backend={"outputs": "jax"})


def _dense(name="dense"):
    """y = tanh(x @ w + b): one input, two params."""
    g = Graph(name)
    x, w, b = g.input("x", (2, 3)), g.param("w", (3, 4)), g.param("b", (4,))
    g.set_outputs([g.tanh(g.add(g.matmul(x, w), b))])
    return g


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6


def _want(params, x=X):
    return np.tanh(x @ params["w"] + params["b"])


# --- platform and availability ----------------------------------------------------------
def test_every_builtin_op_kind_has_a_lowering():
    builtin = {kind for kind, schema in all_schemas().items() if not schema.custom}
    assert builtin - {"input", "param"} <= set(LOWERINGS)


def test_platform_setting(monkeypatch):
    monkeypatch.setenv(platform.PLATFORM_ENV, "cpu")
    cheap = platform.cheap_availability()
    assert cheap.ok and "XLA:CPU standing in for a TPU (RLX_TPU_PLATFORM=cpu)" in cheap.reason
    full = platform.availability("cpu")
    assert full.ok and full.detail["stand_in"] and full.detail["devices"] >= 1
    monkeypatch.setenv(platform.PLATFORM_ENV, "quantum")
    assert not platform.cheap_availability().ok
    with pytest.raises(PolicyError, match="RLX_TPU_PLATFORM='quantum' names no PJRT platform"):
        TpuBackend()


def test_a_real_tpu_needs_libtpu(monkeypatch):
    monkeypatch.delenv(platform.PLATFORM_ENV, raising=False)
    monkeypatch.setattr(platform.importlib.util, "find_spec", lambda name: None)
    cheap = platform.cheap_availability()
    assert not cheap.ok and "libtpu" in cheap.reason and "RLX_TPU_PLATFORM=cpu or gpu" in cheap.reason


def _installed_here(root: Path) -> dict:
    """Environment of a child process that finds rlx-tpu through its entry point: the
    distribution's metadata (as pip writes it) in ``root``, its package on the path."""
    dist = root / "rlx_tpu-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlx-tpu\nVersion: 0.1.0\n")
    pyproject = tomllib.loads((PLUGIN_ROOT / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"]["rlx.backends"]
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (dist / "entry_points.txt").write_text("[rlx.backends]\n" + lines)
    path = os.pathsep.join([str(root), str(PLUGIN_ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "RLX_PLUGINS": "tpu"}


def test_entry_point_discovery_and_rlx_devices(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        from rlx_core import Graph, Session
        from rlx_core.cli import main
        from rlx_core.runtime import registry
        record = next(p for p in registry().plugins if p.name == "tpu")
        print(record.status, record.distribution)
        g = Graph("g")
        g.set_outputs([g.exp(g.input("x", (2,)))])
        print(Session("tpu").compile(g).run({"x": np.zeros(2, np.float32)})[0])
        main(["devices", "--probe", "full"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=_installed_here(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "loaded rlx-tpu" and lines[1] == "[1. 1.]"
    row = next(line for line in lines if line.startswith("tpu"))
    detail = next(line for line in lines if line.startswith("  tpu: "))
    assert "yes" in row and f"standing in for a TPU (RLX_TPU_PLATFORM={PLATFORM})" in detail


def test_tpu_platform_rejects_64_bit_floats_at_compile_time(monkeypatch):
    monkeypatch.setenv(platform.PLATFORM_ENV, "tpu")
    tpu = TpuBackend()
    g = Graph("wide")
    x = g.input("x", (3,), "f64")
    g.set_outputs([g.exp(x), g.cast(g.input("y", (3,)), "f64"), g.arange(4, dtype="f64")])
    reasons = {label.split()[1]: why for label, why in unsupported_nodes(g, tpu)}
    assert sorted(reasons) == ["arange", "cast", "exp"]
    assert "exp on f64 is not supported by backend 'tpu'" in reasons["exp"]
    assert reasons["cast"] == "cast produces f64, which TPUs do not compute"
    assert unsupported_nodes(_dense(), tpu) == []


# --- programs, params, inputs and outputs ---------------------------------------------
def test_programs_are_cached_per_fingerprint_and_precision():
    session = Session("tpu")
    first, second = session.compile(_dense("a")), session.compile(_dense("b"))  # equal graphs, other names
    assert first.executable.program is second.executable.program
    assert session.compile(_dense(), ON_DEVICE).executable.program is first.executable.program
    assert session.compile(_dense(), CompileOptions(precision="bf16")).executable.program \
        is not first.executable.program
    params_a, params_b = _params(1), _params(2)  # one program, params of their own
    first.set_params(params_a)
    second.set_params(params_b)
    assert_close(first.run({"x": X})[0], _want(params_a), "f32")
    assert_close(second.run({"x": X})[0], _want(params_b), "f32")


def test_params_stay_on_the_device_and_are_copies():
    compiled = Session("tpu").compile(_dense(), ON_DEVICE)
    params = _params()
    compiled.set_params(params)
    want = _want(params)
    params["w"][:] = 0  # the caller's array changes: the uploaded param does not
    device = jax.devices(PLATFORM)[0]
    x = jax.device_put(X, device)
    with jax.transfer_guard_host_to_device("disallow"):  # nothing is uploaded per run
        out = compiled.run({"x": x})[0]
    assert isinstance(out, jax.Array) and out.devices() == {device}
    assert_close(np.asarray(out), want, "f32")


def test_outputs_are_new_numpy_arrays_or_fill_out_buffers():
    compiled = Session("tpu").compile(_dense())
    compiled.set_params(_params())
    out = compiled.run({"x": X})[0]
    later = compiled.run({"x": 2 * X})[0]  # a later run leaves earlier outputs alone
    assert isinstance(out, np.ndarray) and out.shape == (2, 4) and out.dtype == np.float32
    assert_close(out, _want(_params()), "f32")
    assert_close(later, _want(_params(), 2 * X), "f32")
    buffer = np.empty((2, 4), np.float32)
    assert compiled.run({"x": X}, out=[buffer])[0] is buffer
    assert_close(buffer, _want(_params()), "f32")


def test_inputs_from_dlpack_producers():
    torch = pytest.importorskip("torch")
    compiled = Session("tpu").compile(_dense())
    compiled.set_param("w", torch.from_numpy(_params()["w"]))  # params from DLPack too
    compiled.set_param("b", jax.numpy.asarray(_params()["b"]))
    want = _want(_params())
    assert_close(compiled.run({"x": torch.from_numpy(X)})[0], want, "f32")
    strided = torch.zeros((2, 6))[:, ::2]  # no compact DLPack form: read through __array__
    strided.copy_(torch.from_numpy(X))
    assert_close(compiled.run({"x": strided})[0], want, "f32")
    with pytest.raises(InputError, match="expected dtype f32, got f64"):
        compiled.run({"x": torch.from_numpy(X.astype(np.float64))})


def test_jax_arrays_and_numpy_views_take_the_checked_paths():
    compiled = Session("tpu").compile(_dense())
    compiled.set_params(_params())
    want = _want(_params())
    assert_close(compiled.run({"x": jax.numpy.asarray(X)})[0], want, "f32")  # the fast path
    strided = np.zeros((2, 6), np.float32).view(np.recarray)[:, ::2]  # a numpy subclass, strided
    strided[...] = X
    assert_close(compiled.run({"x": strided})[0], want, "f32")
    with pytest.raises(InputError, match="expected dtype f32, got i32"):
        compiled.run({"x": jax.numpy.asarray(X.astype(np.int32))})
    with pytest.raises(InputError, match=r"expected dims \[2, 3\], got \[3, 2\]"):
        compiled.run({"x": jax.numpy.asarray(X.T)})


def test_concurrent_runs_agree():
    compiled = Session("tpu").compile(_dense())
    compiled.set_params(_params())
    results = []

    def work():
        for _ in range(20):
            results.append(compiled.run({"x": X})[0])
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80 and all(np.array_equal(r, results[0]) for r in results)


def test_traced_runs_report_the_program(caplog):
    compiled = Session("tpu").compile(_dense("traced"), CompileOptions(trace=True))
    compiled.set_params(_params())
    with caplog.at_level("INFO", logger="rlx.trace"):
        assert_close(compiled.run({"x": X})[0], _want(_params()), "f32")
    assert "traced on tpu: 1 ops" in caplog.text and "(one XLA program)" in caplog.text


def test_backend_options_are_checked():
    session = Session("tpu")
    with pytest.raises(PolicyError, match=r"options \['arena'\] are unknown"):
        session.compile(_dense(), CompileOptions(backend={"arena": 1}))
    with pytest.raises(PolicyError, match="outputs='cupy'"):
        session.compile(_dense(), CompileOptions(backend={"outputs": "cupy"}))
    with pytest.raises(Exception, match="device_index 99 is out of range"):
        session.compile(_dense(), CompileOptions(backend={"device_index": 99}))


# --- what the XLA program holds -------------------------------------------------------
def test_control_flow_runs_inside_the_program():
    g = Graph("loops")
    x, p = g.input("x", (3,)), g.input("p", (), "bool")
    looped = g.while_loop(lambda s, v: s.lt(s.reduce_max(v), 100.0), lambda s, v: s.mul(v, 2.0), x)
    _, ys = g.scan(lambda s, c, t: (s.add(c, t), s.mul(c, t)), g.constant(np.ones(3, np.float32)),
                   g.reshape(g.concat([x, x]), (2, 3)))
    chosen = g.cond(p, lambda s, v: s.exp(v), lambda s, v: s.neg(v), [x])
    g.set_outputs([looped, ys, chosen])
    compiled = Session("tpu").compile(g)
    # The program as lowered, before XLA optimizes it (XLA:GPU turns a cheap conditional
    # into a select of both branches).
    program = compiled.executable.program
    with platform.x64():
        lowered = program._traced.lower(*program._argument_specs(), mode=None).as_text()
    assert lowered.count("stablehlo.while") >= 2 and "stablehlo.case" in lowered
    feeds = {"x": np.array([1.0, 2.0, 3.0], np.float32), "p": np.array(False)}
    for got, want in zip(compiled.run(feeds), evaluate(g, feeds)):
        assert_close(got, want, "f32")


def test_precision_policies_match_the_reference():
    g = Graph("mixed")
    x, w = g.input("x", (4, 8)), g.param("w", (8, 8))
    g.set_outputs([g.softmax(g.gelu(g.matmul(x, w)))])
    rng = np.random.default_rng(3)
    feeds, params = {"x": rng.standard_normal((4, 8)).astype(np.float32)}, \
        {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    for policy in ("bf16", "amp-bf16", "f16", "amp-conservative"):
        compiled = Session("tpu", precision=policy).compile(g)
        compiled.set_params(params)
        want = evaluate(apply_precision(g, policy), feeds, params)[0]
        assert_close(compiled.run(feeds)[0], want, "bf16" if "bf16" in policy else "f16", what=policy)


# --- custom op kinds --------------------------------------------------------------------
def _rule(a, x):
    return x


def _swish_reference(x, *, beta):
    return x / (1 + np.exp(-beta * x))


SWISH = CustomOp("tpu_test.swish", _rule, _swish_reference, attrs={"beta": Attr("float", 1.0)}, dtypes=FLOATS,
                 doc="x * sigmoid(beta * x)")


class SwishLowering:
    traced = 0

    @hookimpl
    def rlx_custom_ops(self):
        return [SWISH]

    @hookimpl
    def rlx_op_kernels(self, backend):
        if backend != "tpu":
            return None

        def lower(x, *, beta):
            SwishLowering.traced += 1
            return x * jax.nn.sigmoid(beta * x)
        return {SWISH.kind: lower}


def _swish_graph(dtype="f32"):
    g = Graph("swish")
    g.set_outputs([g.op(SWISH.kind, g.input("x", (5,), dtype), beta=2.0)])
    return g


def test_custom_op_without_a_lowering_is_rejected_at_compile_time():
    register_custom_op(SWISH)
    with pytest.raises(UnsupportedOpError, match="op kind 'tpu_test.swish' is not supported by backend 'tpu'"):
        Session("tpu").compile(_swish_graph())


def test_custom_op_with_a_registered_lowering_runs_in_the_program():
    plugin = SwishLowering()
    register_backends(plugin)
    try:
        x = np.linspace(-2, 2, 5)
        for dtype in ("f32", "bf16"):
            compiled = Session("tpu").compile(_swish_graph(dtype))
            feeds = {"x": x.astype(compiled.graph.input_nodes[0].attrs["dtype"].np)}
            before = SwishLowering.traced
            for _ in range(2):
                assert_close(compiled.run(feeds)[0], evaluate(_swish_graph(dtype), feeds)[0], dtype)
            assert SwishLowering.traced == before  # traced at compile time, not per run
    finally:
        registry().pm.unregister(plugin)


# --- calibration ------------------------------------------------------------------------
def test_calibration_hook_measures_the_backend(tpu_plugin):
    assert tpu_plugin.rlx_calibrate(backend="cpu", device=None) is None
    from rlx_tpu.calibrate import calibrate
    figures = calibrate(gemm_size=128, elements=1 << 14, repeats=3)
    positive = ("sgemm_gflops", "memory_bw_gbps", "vector_gflops", "dispatch_overhead_ns", "roundtrip_overhead_ns")
    assert all(figures[k] > 0 for k in positive), figures
    assert (figures["transfer_bw_gbps"] is None) == (PLATFORM == "cpu")

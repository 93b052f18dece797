"""The mlx backend beyond op semantics: builds and availability, the program cache,
params resident as MLX arrays, inputs and outputs of every kind, host-held dtypes,
control flow on the host, custom op lowerings, legalization, options and calibration."""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from rlx_core import Attr, CompileOptions, CustomOp, Graph, Session, evaluate, register_custom_op
from rlx_core.errors import GraphError, PolicyError, UnsupportedOpError
from rlx_core.ir import all_schemas
from rlx_core.ir.dtypes import FLOATS
from rlx_core.passes.legalize import unsupported_nodes
from rlx_core.passes.precision import apply_precision
from rlx_core.runtime import hookimpl, register_backends, registry
from rlx_core.testing import assert_close
from rlx_mlx import platform
from rlx_mlx.backend import MlxBackend
from rlx_mlx.lowering import LOWERINGS, control

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
ON_DEVICE = CompileOptions(backend={"outputs": "mlx"})


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


# --- builds and availability ------------------------------------------------------------
def test_every_builtin_op_kind_has_a_lowering():
    builtin = {kind for kind, schema in all_schemas().items() if not schema.custom}
    assert builtin - {"input", "param"} <= set(LOWERINGS)


def test_availability_names_the_build_and_device():
    cheap = platform.cheap_availability()
    assert cheap.ok and cheap.reason.startswith(f"mlx {mx.__version__}")
    full = MlxBackend().is_available()
    assert full.ok and full.detail["mlx"] == mx.__version__ and full.detail["builds"]
    if full.detail["device"] == "cpu":
        assert full.detail["software"] is True and "on the CPU" in full.reason
        assert full.detail["cpu_fusion"] == platform.cpu_fusion()
    else:
        assert full.detail["software"] is False and f"{full.detail['gpu']} GPU" in full.reason


def test_device_setting(monkeypatch):
    monkeypatch.setenv(platform.DEVICE_ENV, "cpu")
    backend = MlxBackend()
    assert backend.is_available().ok and backend.device_kind == "cpu" and backend.mlx_device == mx.Device(mx.cpu)
    monkeypatch.setenv(platform.DEVICE_ENV, "quantum")
    assert "RLX_MLX_DEVICE='quantum' names no MLX device" in platform.cheap_availability().reason
    with pytest.raises(PolicyError, match="RLX_MLX_DEVICE='quantum'"):
        MlxBackend()


@pytest.mark.skipif(mx.metal.is_available() or mx.cuda.is_available(), reason="this MLX build has a GPU")
def test_asking_for_a_gpu_without_one(monkeypatch):
    monkeypatch.setenv(platform.DEVICE_ENV, "gpu")
    why = MlxBackend().is_available()
    assert not why.ok and "has no GPU here" in why.reason and "RLX_MLX_DEVICE" in why.reason


def test_linux_without_a_build_is_unavailable_cheaply(monkeypatch):
    monkeypatch.setattr(platform, "installed_builds", lambda: {})
    monkeypatch.setattr(platform.sys, "platform", "linux")
    why = platform.cheap_availability()
    assert not why.ok and "pip install 'mlx[cpu]'" in why.reason


def _installed_here(root: Path) -> dict:
    """Environment of a child process that finds rlx-mlx through its entry point: the
    distribution's metadata (as pip writes it) in ``root``, its package on the path."""
    dist = root / "rlx_mlx-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlx-mlx\nVersion: 0.1.0\n")
    pyproject = tomllib.loads((PLUGIN_ROOT / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"]["rlx.backends"]
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (dist / "entry_points.txt").write_text("[rlx.backends]\n" + lines)
    path = os.pathsep.join([str(root), str(PLUGIN_ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "RLX_PLUGINS": "mlx"}


def test_entry_point_discovery_and_rlx_devices(tmp_path):
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from rlx_core import Graph, Session
        from rlx_core.cli import main
        from rlx_core.runtime import registry
        record = next(p for p in registry().plugins if p.name == "mlx")
        print(record.status, record.distribution, "mlx.core" in sys.modules)
        g = Graph("g")
        g.set_outputs([g.exp(g.input("x", (2,)))])
        print(Session("mlx").compile(g).run({"x": np.zeros(2, np.float32)})[0])
        main(["devices", "--probe", "full"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=_installed_here(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "loaded rlx-mlx False" and lines[1] == "[1. 1.]"  # loading the plugin imports no MLX
    row = next(line for line in lines if line.startswith("mlx"))
    detail = next(line for line in lines if line.startswith("  mlx: "))
    assert "yes" in row and f"mlx {mx.__version__} (" in detail and " on " in detail


def test_gpu_rejects_64_bit_floats_at_compile_time(monkeypatch):
    gpu = MlxBackend()
    monkeypatch.setattr(MlxBackend, "device_kind", property(lambda self: "gpu"))
    g = Graph("wide")
    x = g.input("x", (3,), "f64")
    g.set_outputs([g.sqrt(x), g.cast(g.input("y", (3,)), "f64"), g.arange(4, dtype="f64")])
    reasons = {label.split()[1]: why for label, why in unsupported_nodes(g, gpu)}
    assert sorted(reasons) == ["arange", "cast", "sqrt"]
    assert "sqrt on f64 is not supported by backend 'mlx'" in reasons["sqrt"]
    assert reasons["cast"] == "cast produces f64, which MLX does not compute on its GPU"
    assert unsupported_nodes(_dense(), gpu) == []


def test_complex128_is_rejected_with_the_reason():
    g = Graph("c128")
    x = g.input("x", (3,), "c64")
    g.set_outputs([g.cast(x, "c128")])
    with pytest.raises(UnsupportedOpError, match="cast produces c128, which MLX does not compute on any device"):
        Session("mlx").compile(g)


def test_inputs_and_params_of_dtypes_mlx_lacks_pass_through_on_the_host():
    g = Graph("held")
    x, p = g.input("x", (2,), "c128"), g.param("p", (3,), "c128")
    y = g.input("y", (2,))
    g.set_outputs([x, g.exp(y), p])
    compiled = Session("mlx").compile(g)
    value = np.array([1 + 2j, 3 - 4j])
    compiled.set_param("p", np.arange(3) * (1 + 1j))
    got = compiled.run({"x": value, "y": np.zeros(2, np.float32)})
    assert got[0].dtype == np.complex128 and np.array_equal(got[0], value) and got[0] is not value
    assert_close(got[1], np.ones(2, np.float32), "f32")
    assert np.array_equal(got[2], np.arange(3) * (1 + 1j))


# --- programs, params, inputs and outputs ---------------------------------------------
def test_programs_are_cached_per_fingerprint_and_precision():
    session = Session("mlx")
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


def test_the_whole_graph_is_one_compiled_function():
    program = Session("mlx").compile(_dense()).executable.program
    assert program.main.compiled and not program.main.hosted
    assert set(program.main._traced) == {"philox"}  # traced at compile time (nothing evaluated)


def test_params_are_resident_mlx_arrays_and_copies():
    compiled = Session("mlx").compile(_dense(), ON_DEVICE)
    params = _params()
    compiled.set_params(params)
    want = _want(params)
    params["w"][:] = 0  # the caller's array changes: the resident param does not
    assert all(isinstance(p, mx.array) for p in compiled.executable._param_args)
    out = compiled.run({"x": X})[0]
    assert isinstance(out, mx.array)
    assert_close(np.asarray(out), want, "f32")


def test_outputs_are_new_read_only_numpy_arrays_or_fill_out_buffers():
    compiled = Session("mlx").compile(_dense())
    compiled.set_params(_params())
    out = compiled.run({"x": X})[0]
    later = compiled.run({"x": 2 * X})[0]  # a later run leaves earlier outputs alone
    assert isinstance(out, np.ndarray) and out.shape == (2, 4) and out.dtype == np.float32
    assert not out.flags.writeable
    assert_close(out, _want(_params()), "f32")
    assert_close(later, _want(_params(), 2 * X), "f32")
    buffer = np.empty((2, 4), np.float32)
    assert compiled.run({"x": X}, out=[buffer])[0] is buffer
    assert_close(buffer, _want(_params()), "f32")


def test_bf16_inputs_and_outputs():
    g = Graph("bf16")
    x = g.input("x", (4,), "bf16")
    g.set_outputs([g.mul(x, x)])
    compiled = Session("mlx").compile(g)
    x = np.array([1.5, -2.0, 0.25, 3.0], dtype=np.float32).astype(g.input_nodes[0].attrs["dtype"].np)
    got = compiled.run({"x": x})[0]
    assert got.dtype == x.dtype
    assert_close(got, evaluate(g, {"x": x})[0], "bf16")


def test_concurrent_runs_agree():
    compiled = Session("mlx").compile(_dense())
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
    compiled = Session("mlx").compile(_dense("traced"), CompileOptions(trace=True))
    compiled.set_params(_params())
    with caplog.at_level("INFO", logger="rlx.trace"):
        assert_close(compiled.run({"x": X})[0], _want(_params()), "f32")
    assert "traced on mlx: 1 ops" in caplog.text and "(one MLX program)" in caplog.text


def test_backend_options_are_checked():
    session = Session("mlx")
    with pytest.raises(PolicyError, match=r"options \['arena'\] are unknown"):
        session.compile(_dense(), CompileOptions(backend={"arena": 1}))
    with pytest.raises(PolicyError, match="outputs='cupy'"):
        session.compile(_dense(), CompileOptions(backend={"outputs": "cupy"}))
    with pytest.raises(PolicyError, match="compile must be True or False"):
        session.compile(_dense(), CompileOptions(backend={"compile": "yes"}))


def test_op_by_op_runs_give_the_same_numbers():
    eager = Session("mlx").compile(_dense(), CompileOptions(backend={"compile": False}))
    assert not eager.executable.program.main.compiled
    assert "fused_elementwise" not in eager.executable.capabilities
    eager.set_params(_params())
    assert_close(eager.run({"x": X})[0], _want(_params()), "f32")


# --- control flow -------------------------------------------------------------------------
def test_control_flow_runs_on_the_host_with_compiled_bodies(monkeypatch):
    g = Graph("loop")
    x = g.input("x", (3,))
    state = g.while_loop(lambda s, v, i: s.lt(i, 5), lambda s, v, i: (s.mul(s.tanh(v), 2.0), s.add(i, 1)),
                         [x, g.constant(np.int32(0))])
    g.set_outputs([g.exp(state[0])])
    compiled = Session("mlx").compile(g)
    program = compiled.executable.program
    assert program.main.hosted and not program.main.compiled
    # Cut at the loop: the nodes before it and after it are compiled segments.
    steps = program.main.steps
    assert [type(s).__name__ for s in steps] == ["Segment", "Node", "Segment"] and steps[1].kind == "while"
    assert [n.kind for n in steps[2].nodes] == ["exp"] and set(steps[2]._traced) == {"philox"}
    bodies = [fn for fn in program._functions.values()]
    assert len(bodies) == 2 and all(fn.compiled for fn in bodies)  # cond and body: mx.compile each
    waits = []
    real = control._truth
    monkeypatch.setattr(control, "_truth", lambda flag: waits.append(1) or real(flag))
    feeds = {"x": np.array([0.1, -0.2, 0.3], np.float32)}
    assert_close(compiled.run(feeds)[0], evaluate(g, feeds)[0], "f32")
    assert len(waits) == 6  # one wait per condition: 5 iterations and the final check


def test_precision_policies_match_the_reference():
    g = Graph("mixed")
    x, w = g.input("x", (4, 8)), g.param("w", (8, 8))
    g.set_outputs([g.softmax(g.gelu(g.matmul(x, w)))])
    rng = np.random.default_rng(3)
    feeds, params = {"x": rng.standard_normal((4, 8)).astype(np.float32)}, \
        {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    for policy in ("bf16", "amp-bf16", "f16", "amp-conservative"):
        compiled = Session("mlx", precision=policy).compile(g)
        compiled.set_params(params)
        want = evaluate(apply_precision(g, policy), feeds, params)[0]
        assert_close(compiled.run(feeds)[0], want, "bf16" if "bf16" in policy else "f16", what=policy)


# --- custom op kinds --------------------------------------------------------------------
def _rule(a, x):
    return x


def _swish_reference(x, *, beta):
    return x / (1 + np.exp(-beta * x))


SWISH = CustomOp("mlx_test.swish", _rule, _swish_reference, attrs={"beta": Attr("float", 1.0)}, dtypes=FLOATS,
                 doc="x * sigmoid(beta * x)")


class SwishLowering:
    traced = 0
    broken = False

    @hookimpl
    def rlx_custom_ops(self):
        return [SWISH]

    @hookimpl
    def rlx_op_kernels(self, backend):
        if backend != "mlx":
            return None

        def lower(x, *, beta):
            SwishLowering.traced += 1
            if SwishLowering.broken:
                return x[:2]
            return x * mx.sigmoid(beta * x)
        return {SWISH.kind: lower}


def _swish_graph(dtype="f32", n=5):
    g = Graph("swish")
    g.set_outputs([g.op(SWISH.kind, g.input("x", (n,), dtype), beta=2.0)])
    return g


def test_custom_op_without_a_lowering_is_rejected_at_compile_time():
    register_custom_op(SWISH)
    with pytest.raises(UnsupportedOpError, match="op kind 'mlx_test.swish' is not supported by backend 'mlx'"):
        Session("mlx").compile(_swish_graph())


def test_custom_op_with_a_registered_lowering_runs_in_the_program():
    plugin = SwishLowering()
    register_backends(plugin)
    try:
        x = np.linspace(-2, 2, 5)
        for dtype in ("f32", "bf16"):
            compiled = Session("mlx").compile(_swish_graph(dtype))
            feeds = {"x": x.astype(compiled.graph.input_nodes[0].attrs["dtype"].np)}
            before = SwishLowering.traced
            for _ in range(2):
                assert_close(compiled.run(feeds)[0], evaluate(_swish_graph(dtype), feeds)[0], dtype)
            assert SwishLowering.traced == before  # traced at compile time, not per run
        SwishLowering.broken = True  # a lowering giving the wrong dims fails at compile time
        with pytest.raises(GraphError, match=r"mlx lowering of .* gave \[2\] f32, expected \[7\] f32"):
            Session("mlx").compile(_swish_graph("f32", 7))
    finally:
        SwishLowering.broken = False
        registry().pm.unregister(plugin)


# --- calibration ------------------------------------------------------------------------
def test_calibration_hook_measures_the_backend(mlx_plugin):
    assert mlx_plugin.rlx_calibrate(backend="cpu", device=None) is None
    from rlx_mlx.calibrate import calibrate
    figures = calibrate(elements=1 << 14, repeats=3, gemm_sizes=(64, 128))
    positive = ("sgemm_gflops", "memory_bw_gbps", "vector_gflops", "dispatch_overhead_ns", "roundtrip_overhead_ns")
    assert all(figures[k] > 0 for k in positive), figures
    assert figures["software"] == (MlxBackend().device_kind == "cpu")

"""The mlx backend beyond op semantics: builds and availability, the program cache,
params resident as MLX arrays, inputs and outputs of every kind, host-held dtypes,
control flow on the host, custom op lowerings, legalization, options and calibration."""
import subprocess
import sys
import textwrap
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session, evaluate
from rlx_core.errors import GraphError, PolicyError, UnsupportedOpError
from rlx_core.passes.legalize import unsupported_nodes
from rlx_core.runtime import hookimpl, register_backends, registry
from rlx_core.testing import assert_close
from rlx_core.testing import backend_contract as contract
from rlx_core.testing.backend_contract import DENSE_X as X
from rlx_core.testing.backend_contract import dense_graph as _dense
from rlx_core.testing.backend_contract import dense_params as _params
from rlx_core.testing.backend_contract import dense_want as _want
from rlx_mlx import platform
from rlx_mlx.backend import MlxBackend
from rlx_mlx.lowering import LOWERINGS, control

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
ON_DEVICE = CompileOptions(backend={"outputs": "mlx"})


# --- builds and availability ------------------------------------------------------------
def test_every_builtin_op_kind_has_a_lowering():
    contract.check_every_builtin_op_has_a_lowering(LOWERINGS)


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
                         env=contract.entry_point_env(tmp_path, PLUGIN_ROOT, "mlx"))
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
    contract.check_programs_cached_per_fingerprint("mlx", ON_DEVICE)


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
    out = contract.check_outputs_are_numpy_or_out_buffers("mlx")
    assert not out.flags.writeable


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
    contract.check_concurrent_runs_agree("mlx")


def test_traced_runs_report_the_program(caplog):
    contract.check_traced_runs_report_the_program("mlx", caplog, "MLX")


def test_backend_options_are_checked():
    contract.check_unknown_backend_options("mlx")
    session = Session("mlx")
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
    contract.check_precision_policies("mlx")


# --- custom op kinds --------------------------------------------------------------------
SWISH = contract.swish_op("mlx_test")


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


def test_custom_op_without_a_lowering_is_rejected_at_compile_time():
    contract.check_custom_op_without_lowering("mlx", SWISH)


def test_custom_op_with_a_registered_lowering_runs_in_the_program():
    plugin = SwishLowering()
    register_backends(plugin)
    try:
        contract.check_custom_op_lowering_traced_once("mlx", SWISH, lambda: SwishLowering.traced)
        SwishLowering.broken = True  # a lowering giving the wrong dims fails at compile time
        with pytest.raises(GraphError, match=r"mlx lowering of .* gave \[2\] f32, expected \[7\] f32"):
            Session("mlx").compile(contract.swish_graph(SWISH, "f32", 7))
    finally:
        SwishLowering.broken = False
        registry().pm.unregister(plugin)


# --- calibration ------------------------------------------------------------------------
def test_calibration_hook_measures_the_backend(mlx_plugin):
    assert mlx_plugin.rlx_calibrate(backend="cpu", device=None) is None
    from rlx_mlx.calibrate import calibrate
    figures = calibrate(elements=1 << 14, repeats=3, gemm_sizes=(64, 128))
    contract.check_calibration_figures(figures)
    assert figures["software"] == (MlxBackend().device_kind == "cpu")

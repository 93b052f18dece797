"""The tpu backend beyond op semantics: platform choice and availability, the program
cache, params on the device, inputs and outputs of every kind, control flow compiled
into the XLA program, custom op lowerings, legalization, options and calibration."""
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, Session, evaluate
from rlx_core.errors import InputError, PolicyError
from rlx_core.passes.legalize import unsupported_nodes
from rlx_core.runtime import hookimpl, register_backends, registry
from rlx_core.testing import assert_close
from rlx_core.testing import backend_contract as contract
from rlx_core.testing.backend_contract import DENSE_X as X
from rlx_core.testing.backend_contract import dense_graph as _dense
from rlx_core.testing.backend_contract import dense_params as _params
from rlx_core.testing.backend_contract import dense_want as _want
from rlx_tpu import platform
from rlx_tpu.backend import TpuBackend
from rlx_tpu.lowering import LOWERINGS

PLATFORM = platform.requested_platform()
PLUGIN_ROOT = Path(__file__).resolve().parents[1]
ON_DEVICE = CompileOptions(backend={"outputs": "jax"})


# --- platform and availability ----------------------------------------------------------
def test_every_builtin_op_kind_has_a_lowering():
    contract.check_every_builtin_op_has_a_lowering(LOWERINGS)


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
                         env=contract.entry_point_env(tmp_path, PLUGIN_ROOT, "tpu"))
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
    contract.check_programs_cached_per_fingerprint("tpu", ON_DEVICE)


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


def test_launch_is_the_xla_program_alone():
    """``launch``: the program on device arrays, nothing checked, moved or waited for."""
    compiled = Session("tpu").compile(_dense())
    compiled.set_params(_params())
    x = jax.device_put(X, compiled.executable.program.input_shardings[0])
    with jax.transfer_guard("disallow"):
        out = compiled.executable.launch((x,))
    assert isinstance(out, list) and isinstance(out[0], jax.Array)
    assert_close(np.asarray(out[0]), compiled.run({"x": X})[0], "f32")


def test_submitted_numpy_outputs_equal_run_and_errors_wait():
    """Numpy outputs of submits (their copies queued with the run) are each run's own,
    equal to ``run``'s."""
    g = Graph("two")
    x = g.input("x", (2, 3), "f32")
    g.set_outputs([g.tanh(x), g.sum(x, axes=[1]), g.exp(x)])
    compiled = Session("tpu").compile(g)
    xs = [X + i for i in range(4)]
    handles = [compiled.submit({"x": x}) for x in xs]
    for h, x in zip(handles, xs):
        got = h.wait()
        assert all(isinstance(o, np.ndarray) for o in got)
        for a, b in zip(got, compiled.run({"x": x})):
            np.testing.assert_array_equal(a, b)


def test_outputs_are_new_numpy_arrays_or_fill_out_buffers():
    contract.check_outputs_are_numpy_or_out_buffers("tpu")


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
    contract.check_concurrent_runs_agree("tpu")


def test_traced_runs_report_the_program(caplog):
    contract.check_traced_runs_report_the_program("tpu", caplog, "XLA")


def test_backend_options_are_checked():
    contract.check_unknown_backend_options("tpu")
    session = Session("tpu")
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
    contract.check_precision_policies("tpu")


# --- custom op kinds --------------------------------------------------------------------
SWISH = contract.swish_op("tpu_test")


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


def test_custom_op_without_a_lowering_is_rejected_at_compile_time():
    contract.check_custom_op_without_lowering("tpu", SWISH)


def test_custom_op_with_a_registered_lowering_runs_in_the_program():
    plugin = SwishLowering()
    register_backends(plugin)
    try:
        contract.check_custom_op_lowering_traced_once("tpu", SWISH, lambda: SwishLowering.traced)
    finally:
        registry().pm.unregister(plugin)


# --- calibration ------------------------------------------------------------------------
def test_calibration_hook_measures_the_backend(tpu_plugin):
    assert tpu_plugin.rlx_calibrate(backend="cpu", device=None) is None
    from rlx_tpu.calibrate import calibrate
    figures = calibrate(gemm_size=128, elements=1 << 14, repeats=3)
    contract.check_calibration_figures(figures)
    assert (figures["transfer_bw_gbps"] is None) == (PLATFORM == "cpu")

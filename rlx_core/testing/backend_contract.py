"""Backend-contract checks a plugin's own tests call with its backend name: what every
backend that compiles a whole graph into one program must do beyond op semantics
(rlx-mlx and rlx-tpu use them; tests in ``tests/`` directories cannot import each other,
since pytest runs them with ``--import-mode=importlib``).

The fixture graph is :func:`dense_graph` -- ``y = tanh(x @ w + b)``, one input ``x``
[2, 3] and two params -- with :func:`dense_params`, :data:`DENSE_X` and
:func:`dense_want` (its numpy result). Each ``check_*`` function asserts one part of the
contract and raises ``AssertionError`` (or ``pytest.fail``) when the backend breaks it:

* :func:`check_every_builtin_op_has_a_lowering` -- a lowering table covers every builtin kind;
* :func:`check_programs_cached_per_fingerprint` -- equal graphs share one program, another
  precision gets another one, params stay each compiled graph's own;
* :func:`check_outputs_are_numpy_or_out_buffers` -- fresh numpy outputs, ``out=`` filled;
* :func:`check_concurrent_runs_agree` -- runs from four threads give the same numbers;
* :func:`check_traced_runs_report_the_program` -- ``trace=True`` logs the one program;
* :func:`check_unknown_backend_options` -- unknown options and a bad ``outputs`` refused;
* :func:`check_precision_policies` -- each precision policy matches the reference;
* :func:`swish_op`, :func:`swish_graph`, :func:`check_custom_op_without_lowering`,
  :func:`check_custom_op_lowering_traced_once` -- a custom op kind, refused without a
  lowering and traced at compile time (not per run) with one;
* :func:`rng_loops_graph`, :func:`check_loop_draws_match_reference` -- rng nodes in
  loop bodies draw under the per-iteration folded seed, as the reference does;
* :func:`check_calibration_figures` -- the throughput and overhead figures all positive;
* :func:`entry_point_env` -- the environment of a child process that discovers a plugin
  through its entry point, as pip would install it.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from ..custom import CustomOp
from ..ir import Attr, Graph, all_schemas
from ..ir.dtypes import FLOATS
from .compare import assert_close

__all__ = ["DENSE_X", "dense_graph", "dense_params", "dense_want", "check_every_builtin_op_has_a_lowering",
           "check_programs_cached_per_fingerprint", "check_outputs_are_numpy_or_out_buffers",
           "check_concurrent_runs_agree", "check_traced_runs_report_the_program", "check_unknown_backend_options",
           "check_precision_policies", "swish_op", "swish_graph", "check_custom_op_without_lowering",
           "check_custom_op_lowering_traced_once", "rng_loops_graph", "check_loop_draws_match_reference",
           "CALIBRATION_FIGURES", "check_calibration_figures",
           "entry_point_env"]

DENSE_X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6


def dense_graph(name: str = "dense") -> Graph:
    """y = tanh(x @ w + b): one input, two params."""
    g = Graph(name)
    x, w, b = g.input("x", (2, 3)), g.param("w", (3, 4)), g.param("b", (4,))
    g.set_outputs([g.tanh(g.add(g.matmul(x, w), b))])
    return g


def dense_params(seed: int = 0) -> dict:
    """Standard-normal f32 ``w`` [3, 4] and ``b`` [4] for :func:`dense_graph`."""
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


def dense_want(params: dict, x: np.ndarray = DENSE_X) -> np.ndarray:
    """The numpy result of :func:`dense_graph` for ``params`` and input ``x``."""
    return np.tanh(x @ params["w"] + params["b"])


def check_every_builtin_op_has_a_lowering(lowerings) -> None:
    """Every builtin op kind but ``input`` and ``param`` is a key of ``lowerings``."""
    builtin = {kind for kind, schema in all_schemas().items() if not schema.custom}
    assert builtin - {"input", "param"} <= set(lowerings)


def check_programs_cached_per_fingerprint(backend: str, on_device) -> None:
    """Equal graphs of other names share one program (also when compiled with the
    ``on_device`` options), a bf16 precision gets another, and params stay per graph."""
    from ..runtime import CompileOptions, Session
    session = Session(backend)
    first, second = session.compile(dense_graph("a")), session.compile(dense_graph("b"))  # equal graphs, other names
    assert first.executable.program is second.executable.program
    assert session.compile(dense_graph(), on_device).executable.program is first.executable.program
    assert session.compile(dense_graph(), CompileOptions(precision="bf16")).executable.program \
        is not first.executable.program
    params_a, params_b = dense_params(1), dense_params(2)  # one program, params of their own
    first.set_params(params_a)
    second.set_params(params_b)
    assert_close(first.run({"x": DENSE_X})[0], dense_want(params_a), "f32")
    assert_close(second.run({"x": DENSE_X})[0], dense_want(params_b), "f32")


def check_outputs_are_numpy_or_out_buffers(backend: str) -> np.ndarray:
    """Outputs are new f32 numpy arrays a later run leaves alone, or fill ``out`` buffers;
    returns the first output (for the backend's own further checks)."""
    from ..runtime import Session
    compiled = Session(backend).compile(dense_graph())
    compiled.set_params(dense_params())
    out = compiled.run({"x": DENSE_X})[0]
    later = compiled.run({"x": 2 * DENSE_X})[0]  # a later run leaves earlier outputs alone
    assert isinstance(out, np.ndarray) and out.shape == (2, 4) and out.dtype == np.float32
    assert_close(out, dense_want(dense_params()), "f32")
    assert_close(later, dense_want(dense_params(), 2 * DENSE_X), "f32")
    buffer = np.empty((2, 4), np.float32)
    assert compiled.run({"x": DENSE_X}, out=[buffer])[0] is buffer
    assert_close(buffer, dense_want(dense_params()), "f32")
    return out


def check_concurrent_runs_agree(backend: str, threads: int = 4, runs: int = 20) -> None:
    """``threads`` threads each running one compiled graph ``runs`` times get equal outputs."""
    from ..runtime import Session
    compiled = Session(backend).compile(dense_graph())
    compiled.set_params(dense_params())
    results = []

    def work():
        for _ in range(runs):
            results.append(compiled.run({"x": DENSE_X})[0])
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert len(results) == threads * runs and all(np.array_equal(r, results[0]) for r in results)


def check_traced_runs_report_the_program(backend: str, caplog, program: str) -> None:
    """A run compiled with ``trace=True`` logs one op on ``backend`` and ``(one <program>
    program)`` to ``rlx.trace`` (``caplog`` is pytest's fixture)."""
    from ..runtime import CompileOptions, Session
    compiled = Session(backend).compile(dense_graph("traced"), CompileOptions(trace=True))
    compiled.set_params(dense_params())
    with caplog.at_level("INFO", logger="rlx.trace"):
        assert_close(compiled.run({"x": DENSE_X})[0], dense_want(dense_params()), "f32")
    assert f"traced on {backend}: 1 ops" in caplog.text and f"(one {program} program)" in caplog.text


def check_unknown_backend_options(backend: str) -> None:
    """An unknown backend option and ``outputs='cupy'`` are refused with a PolicyError."""
    import pytest

    from ..errors import PolicyError
    from ..runtime import CompileOptions, Session
    session = Session(backend)
    with pytest.raises(PolicyError, match=r"options \['arena'\] are unknown"):
        session.compile(dense_graph(), CompileOptions(backend={"arena": 1}))
    with pytest.raises(PolicyError, match="outputs='cupy'"):
        session.compile(dense_graph(), CompileOptions(backend={"outputs": "cupy"}))


def check_precision_policies(backend: str) -> None:
    """softmax(gelu(x @ w)) under bf16, amp-bf16, f16 and amp-conservative matches the
    reference interpreter on the graph the policy rewrites."""
    from ..passes.precision import apply_precision
    from ..reference import evaluate
    from ..runtime import Session
    g = Graph("mixed")
    x, w = g.input("x", (4, 8)), g.param("w", (8, 8))
    g.set_outputs([g.softmax(g.gelu(g.matmul(x, w)))])
    rng = np.random.default_rng(3)
    feeds, params = {"x": rng.standard_normal((4, 8)).astype(np.float32)}, \
        {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    for policy in ("bf16", "amp-bf16", "f16", "amp-conservative"):
        compiled = Session(backend, precision=policy).compile(g)
        compiled.set_params(params)
        want = evaluate(apply_precision(g, policy), feeds, params)[0]
        assert_close(compiled.run(feeds)[0], want, "bf16" if "bf16" in policy else "f16", what=policy)


def _same_dims(a, x):
    return x


def _swish_reference(x, *, beta):
    return x / (1 + np.exp(-beta * x))


def swish_op(namespace: str) -> CustomOp:
    """The custom op kind ``<namespace>.swish``: x * sigmoid(beta * x) on floats."""
    return CustomOp(f"{namespace}.swish", _same_dims, _swish_reference, attrs={"beta": Attr("float", 1.0)},
                    dtypes=FLOATS, doc="x * sigmoid(beta * x)")


def swish_graph(op: CustomOp, dtype: str = "f32", n: int = 5) -> Graph:
    """One ``op`` node (beta 2) on an input ``x`` [n] of ``dtype``."""
    g = Graph("swish")
    g.set_outputs([g.op(op.kind, g.input("x", (n,), dtype), beta=2.0)])
    return g


def check_custom_op_without_lowering(backend: str, op: CustomOp) -> None:
    """``op`` registered without a lowering for ``backend`` is refused at compile time."""
    import pytest

    from ..custom import register_custom_op
    from ..errors import UnsupportedOpError
    from ..runtime import Session
    register_custom_op(op)
    with pytest.raises(UnsupportedOpError, match=f"op kind '{op.kind}' is not supported by backend '{backend}'"):
        Session(backend).compile(swish_graph(op))


def check_custom_op_lowering_traced_once(backend: str, op: CustomOp, traced: Callable[[], int]) -> None:
    """With a lowering of ``op`` registered (``traced()`` counts its calls), f32 and bf16
    graphs match the reference on two runs each without tracing it again."""
    from ..reference import evaluate
    from ..runtime import Session
    x = np.linspace(-2, 2, 5)
    for dtype in ("f32", "bf16"):
        compiled = Session(backend).compile(swish_graph(op, dtype))
        feeds = {"x": x.astype(compiled.graph.input_nodes[0].attrs["dtype"].np)}
        before = traced()
        for _ in range(2):
            assert_close(compiled.run(feeds)[0], evaluate(swish_graph(op, dtype), feeds)[0], dtype)
        assert traced() == before  # traced at compile time, not per run


def rng_loops_graph(draw_outside: bool = False) -> Graph:
    """rng nodes in a while body, a scan body and a scan nested in a while body (and, when
    ``draw_outside``, one drawn outside the loops, added to the while loop's result)."""
    g = Graph("loops")
    x = g.input("x", (3,))
    counted = g.while_loop(lambda s, v, i: s.lt(i, 4),
                           lambda s, v, i: (s.add(v, s.rng_normal((3,))), s.add(i, 1)), [x, g.constant(np.int32(0))])
    _, ys = g.scan(lambda s, c, t: (s.add(c, t), s.add(t, s.rng_uniform((3,)))), g.constant(np.zeros(3, np.float32)),
                   g.reshape(g.concat([x, x]), (2, 3)))

    def nested(s, v, i):
        _, inner = s.scan(lambda t, c, r: (c, t.mul(r, t.rng_uniform((3,)))), s.constant(np.zeros(3, np.float32)),
                          s.reshape(s.concat([v, v, v]), (3, 3)))
        return s.reduce_max(inner, 0), s.add(i, 1)
    nest = g.while_loop(lambda s, v, i: s.lt(i, 2), nested, [x, g.constant(np.int32(0))])
    g.set_outputs([g.add(counted[0], g.rng_uniform((3,))) if draw_outside else counted[0], ys, nest[0]])
    return g


def check_loop_draws_match_reference(backend: str, mode: str, draw_outside: bool = False) -> None:
    """:func:`rng_loops_graph` compiled for ``backend`` matches the reference (f32) under
    rng ``mode`` for seeds 0, 123456789 and 2**63."""
    from ..reference import evaluate
    from ..rng import RngOptions
    from ..runtime import Session
    g = rng_loops_graph(draw_outside)
    compiled = Session(backend).compile(g)
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for seed in (0, 123456789, 2**63):
        options = RngOptions(seed, mode)
        compiled.set_rng(options)
        for got, want in zip(compiled.run({"x": x}), evaluate(g, {"x": x}, rng=options)):
            assert_close(got, want, "f32")


CALIBRATION_FIGURES = ("sgemm_gflops", "memory_bw_gbps", "vector_gflops", "dispatch_overhead_ns",
                       "roundtrip_overhead_ns")


def check_calibration_figures(figures: dict) -> None:
    """Every figure of :data:`CALIBRATION_FIGURES` in ``figures`` is above zero."""
    assert all(figures[k] > 0 for k in CALIBRATION_FIGURES), figures


def entry_point_env(root: Path, plugin_root: Path, plugins: str) -> dict:
    """Environment of a child process that finds the plugin in ``plugin_root`` through its
    entry point: the distribution's metadata (as pip writes it: name and version 0.1.0,
    its ``rlx.backends`` entry points from ``pyproject.toml``) in ``root``, its package on
    the path, and ``RLX_PLUGINS=plugins``."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import pytest
        tomllib = pytest.importorskip("tomli")
    pyproject = tomllib.loads((Path(plugin_root) / "pyproject.toml").read_text())
    name = pyproject["project"]["name"]
    dist = Path(root) / f"{name.replace('-', '_')}-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    entry_points = pyproject["project"]["entry-points"]["rlx.backends"]
    lines = "".join(f"{ep} = {value}\n" for ep, value in entry_points.items())
    (dist / "entry_points.txt").write_text("[rlx.backends]\n" + lines)
    path = os.pathsep.join([str(root), str(plugin_root), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "RLX_PLUGINS": plugins}

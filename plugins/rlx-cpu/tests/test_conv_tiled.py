"""The SIMD convolution routes ``tiled`` and ``rows`` (``rlx_cpu.jit.simd``) against the
reference interpreter:
geometries where its tiles do not divide the output (channel counts that are no multiple
of 16, rows that are no multiple of the tile's columns), padding, strides, dilations,
1-D, batches, constant weights (packed once) and params (packed each run), inputs that
are views, and conv/relu/pool/add chains. The route is forced wherever it applies."""
import numpy as np
import pytest

from rlx_core import Graph, Session, evaluate
from rlx_core.testing.compare import assert_close

from rlx_cpu.jit import generated_kernel, specialize
from rlx_cpu.jit.simd import rows_conv_source, tiled_conv_source
from rlx_cpu.kernels import conv, conv_simd


def _force(monkeypatch, route):
    """Every conv offering ``route`` takes it, the others their first route (stored nowhere)."""
    monkeypatch.setattr(conv, "_fastest_route", lambda geometry, routes: route if route in routes else routes[0])
    monkeypatch.setattr(conv._decisions, "get", lambda key: None)
    monkeypatch.setattr(conv._decisions, "set", lambda key, value, provisional=False: None)


@pytest.fixture(params=["tiled", "rows", "rows2"])
def route(request, monkeypatch):
    _force(monkeypatch, request.param)
    return request.param


def _check(g: Graph, params: dict, inputs: dict):
    compiled = Session("cpu").compile(g)
    compiled.set_params(params)
    for n in (n for n in g.nodes if n.kind == "conv"):  # taken wherever offered (rows: unit column stride)
        route = conv.conv_route(n, g)
        assert route in ("tiled", "rows", "rows2") or route == conv._Geometry(n, g).routes()[0]
    expected = evaluate(g, inputs, params)
    for _ in range(2):  # a second run reuses packed weights and scratch
        for got, want in zip(compiled.run(inputs), expected):
            assert_close(got, want, "f32")


def _rand(rng, *dims):
    return rng.standard_normal(dims).astype(np.float32)


GEOMETRIES = [  # (batch, C, H, W, Co, kernel, strides, pads, dilations)
    (1, 3, 20, 21, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # one block, a 16-column tile + 5 left over
    (2, 5, 11, 13, 37, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 3 blocks (a pair + one), 37 of 48 lanes used
    (1, 16, 9, 19, 32, (3, 3), (2, 2), (0, 1, 2, 1), (1, 1)),  # strides, asymmetric pads
    (1, 7, 15, 17, 20, (5, 3), (1, 2), (2, 1, 2, 1), (2, 3)),  # dilations, a 5x3 kernel
    (1, 33, 8, 8, 65, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),  # strided 1x1 (no pointwise route)
    (1, 4, 6, 6, 9, (6, 6), (1, 1), (0, 0, 0, 0), (1, 1)),  # kernel = input: one output
]


@pytest.mark.parametrize("batch,c,h,w,co,kernel,strides,pads,dilations", GEOMETRIES)
def test_geometries(route, batch, c, h, w, co, kernel, strides, pads, dilations):
    rng = np.random.default_rng(0)
    g = Graph("conv")
    x = g.input("x", (batch, c, h, w))
    g.set_outputs([g.conv(x, g.param("w", (co, c) + kernel), g.param("b", (co,)), strides=strides, pads=pads,
                          dilations=dilations)])
    _check(g, {"w": _rand(rng, co, c, *kernel), "b": _rand(rng, co)}, {"x": _rand(rng, batch, c, h, w)})


def test_one_dimensional_conv(route):
    rng = np.random.default_rng(1)
    g = Graph("conv1d")
    x = g.input("x", (2, 6, 29))
    g.set_outputs([g.conv(x, g.param("w", (18, 6, 4)), strides=(2,), pads=(3, 1), dilations=(2,))])
    _check(g, {"w": _rand(rng, 18, 6, 4)}, {"x": _rand(rng, 2, 6, 29)})


def test_constant_weights_are_packed_once(route):
    rng = np.random.default_rng(2)
    weights = _rand(rng, 24, 3, 3, 3)
    g = Graph("conv_const")
    x = g.input("x", (1, 3, 12, 12))
    g.set_outputs([g.relu(g.conv(x, g.constant(weights), pads=1))])
    compiled = Session("cpu").compile(g)
    calls = [c for s in compiled.executable._runs._planned(lambda c: c)[0:] for c in s[1]]
    assert not any("pack_conv_weights" in getattr(c.fn, "__name__", "") for c in calls)
    _check(g, {}, {"x": _rand(rng, 1, 3, 12, 12)})


def test_new_params_reach_the_packed_weights(route):
    rng = np.random.default_rng(3)
    g = Graph("conv")
    x = g.input("x", (1, 4, 10, 10))
    g.set_outputs([g.conv(x, g.param("w", (20, 4, 3, 3)), pads=1)])
    compiled = Session("cpu").compile(g)
    inputs = {"x": _rand(rng, 1, 4, 10, 10)}
    for _ in range(2):
        params = {"w": _rand(rng, 20, 4, 3, 3)}
        compiled.set_params(params)
        assert_close(compiled.run(inputs)[0], evaluate(g, inputs, params)[0], "f32")


def test_input_that_is_a_transposed_view(route):
    rng = np.random.default_rng(4)
    g = Graph("conv_view")
    x = g.input("x", (1, 9, 8, 5))
    xt = g.transpose(x, (0, 1, 3, 2))  # [1, 9, 5, 8], a view: not C-contiguous
    g.set_outputs([g.conv(xt, g.param("w", (17, 9, 1, 3)))])
    _check(g, {"w": _rand(rng, 17, 9, 1, 3)}, {"x": _rand(rng, 1, 9, 8, 5)})


def test_conv_relu_pool_add_chain(route):
    """Consecutive tiled convs with the epilogues, pooling and a residual add between."""
    rng = np.random.default_rng(5)
    g = Graph("chain")
    x = g.input("x", (2, 3, 18, 18))
    params = {}

    def p(name, *dims):
        params[name] = _rand(rng, *dims) * 0.3
        return g.param(name, dims)
    h = g.relu(g.conv(x, p("w1", 19, 3, 3, 3), p("b1", 19), pads=1))
    h = g.pool2d(h, "max", 2)
    r = g.relu(g.conv(h, p("w2", 19, 19, 3, 3), p("b2", 19), pads=1))
    h = g.add(h, r)
    h = g.pool2d(g.conv(h, p("w3", 40, 19, 3, 3), pads=(0, 1, 2, 1), strides=(1, 2)), "avg", 2)
    g.set_outputs([g.mean(g.relu(h), axes=(2, 3)), h])
    _check(g, params, {"x": _rand(rng, 2, 3, 18, 18)})


@pytest.mark.parametrize("blocks,positions", [(1, 16), (2, 8), (2, 3)])
def test_tiled_kernel_tiles_and_tails(blocks, positions):
    """The generated tiled kernel alone, for every tile shape and each tail width."""
    rng = np.random.default_rng(6)
    xp = _rand(rng, 6, 9, 23)
    w = _rand(rng, 40, 6, 2, 3)
    packed = np.zeros((3, 2, 3, 6, 16), np.float32)
    for o in range(40):
        packed[o // 16, :, :, :, o % 16] = w[o].transpose(1, 2, 0)
    for wo in range(1, 22):
        y = np.zeros((8, wo, 48), np.float32)
        args = (xp, packed, y, 1, 1, 1, 1)
        specialize(generated_kernel(tiled_conv_source(blocks, positions, wo % positions)), *args)(*args)
        want = sum(np.einsum("chw,oc->hwo", xp[:, i:i + 8, j:j + wo], w[:, :, i, j]) for i in range(2)
                   for j in range(3))
        np.testing.assert_allclose(y[:, :, :40], want, rtol=1e-4, atol=1e-4)
        assert not y[:, :, 40:].any()  # the zero-padded lanes


@pytest.mark.parametrize("channels,rows,parallel", [(8, 2, False), (8, 1, False), (5, 3, False), (8, 2, True)])
def test_rows_kernel_tiles_and_masks(channels, rows, parallel):
    """The generated rows kernel alone: row lengths with a masked last tile, output heights
    where the last tile's rows overlap, a channel count not a multiple of the tile,
    padding read as masked-off lanes (outputs reaching past the image's end too)."""
    rng = np.random.default_rng(7)
    xp = _rand(rng, 6, 12, 40)
    w = _rand(rng, 11, 6, 2, 3)
    packed = np.zeros((-(-11 // channels), 2, 3, 6, channels), np.float32)
    for o in range(11):
        packed[o // channels, :, :, :, o % channels] = w[o].transpose(1, 2, 0)
    padded = np.zeros((6, 12 + 10, 40 + 11), np.float32)  # 2 rows on top, 3 columns left, more past the end
    padded[:, 2:14, 3:43] = xp
    for ho, wo in [(rows, 1), (rows + 1, 15), (7, 16), (9, 17), (11, 33), (5, 38), (16, 44)]:
        for top, left in [(0, 0), (2, 3)]:
            y = np.full((11, ho, wo), np.nan, np.float32)
            args = (xp, packed, y, 1, 1, 1, top, left, 0, packed.shape[0], np.zeros(11, np.float32))
            if parallel:
                args += (2,)
            name = "kernel_threads" if parallel else "kernel"
            specialize(generated_kernel(rows_conv_source(channels, rows), name), *args)(*args)
            src = padded[:, 2 - top:, 3 - left:]
            want = sum(np.einsum("chw,oc->ohw", src[:, i:i + ho, j:j + wo], w[:, :, i, j]) for i in range(2)
                       for j in range(3))
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


class _Load:
    def __init__(self, state):
        self.state_now, self.stalls = state, 0

    def state(self):
        return self.state_now

    def report_stall(self):
        self.stalls += 1


def test_two_cores_only_while_quiet_and_sustained_and_slow_runs_reported(monkeypatch):
    from rlx_cpu.load import LOADED, QUIET
    clock = [100.0]
    monkeypatch.setattr(conv_simd.time, "perf_counter", lambda: clock[0])
    ran = []
    pace = conv_simd.Sustained()
    call = conv_simd.WhileQuiet(lambda *a: ran.append("serial"), lambda *a: ran.append("both"), 1.0, pace)
    call._load = _Load(QUIET)
    for _ in range(16):  # calls 4 ms apart: sustained from 50 ms on
        call()
        clock[0] += 0.004
    assert ran == ["serial"] * 13 + ["both"] * 3
    ran.clear()
    call._load.state_now = LOADED
    call()
    call._load.state_now = QUIET
    clock[0] += 0.02  # a pause: the workers are asleep
    call()
    assert ran == ["serial", "serial"] and call._load.stalls == 0
    slow = conv_simd.WhileQuiet(None, lambda *a: clock.__setitem__(0, clock[0] + 0.01), 0.001, pace)
    slow._load = _Load(QUIET)
    pace.since = clock[0] - 1.0
    pace.last = clock[0]
    slow()
    assert slow._load.stalls == 1


def test_a_deferred_two_core_kernel_is_compiled_off_the_call_and_serial_serves_meanwhile(monkeypatch):
    from rlx_cpu.load import QUIET
    import threading
    clock = [100.0]
    monkeypatch.setattr(conv_simd.time, "perf_counter", lambda: clock[0])
    compiled, release, ran = [], threading.Event(), []

    def make():  # the compile: held until the test lets it finish
        release.wait(10)
        compiled.append(threading.current_thread().name)
        return lambda *a: ran.append("both")
    deferred = conv_simd.Deferred(make)
    pace = conv_simd.Sustained()
    pace.since, pace.last = clock[0] - 1.0, clock[0]  # calls have come back to back for a second
    call = conv_simd.WhileQuiet(lambda *a: ran.append("serial"), deferred, 1.0, pace)
    call._load = _Load(QUIET)
    call()
    call()
    assert ran == ["serial", "serial"] and not compiled  # compiling, not waited for
    release.set()
    for _ in range(100):
        if deferred.fn is not None:
            break
        threading.Event().wait(0.01)
    call()
    assert ran[-1] == "both" and compiled == ["rlx-cpu-compile"]


def test_conv_bias_relu_step_runs_in_the_conv_kernel(route):
    """conv + bias + relu as one kernel call on the rows routes (the epilogue applied as
    results are stored; a NaN stays NaN through the relu, as in the reference)."""
    rng = np.random.default_rng(8)
    g = Graph("conv_bias_relu")
    x = g.input("x", (1, 4, 9, 11))
    g.set_outputs([g.relu(g.conv(x, g.param("w", (10, 4, 3, 3)), g.param("b", (10,)), pads=1))])
    params = {"w": _rand(rng, 10, 4, 3, 3), "b": _rand(rng, 10)}
    inputs = {"x": _rand(rng, 1, 4, 9, 11)}
    inputs["x"][0, 2, 4, 5] = np.nan
    compiled = Session("cpu").compile(g)
    compiled.set_params(params)
    (step_label, calls), = [(label, c) for label, c in compiled.executable._runs._planned(lambda c: c) if label]
    kernels = [c for c in calls if "pack_conv_weights" not in getattr(c.fn, "__name__", "")]
    assert len(kernels) == (1 if route != "tiled" else 3)  # tiled: conv, then the fused bias + relu pass
    got, want = compiled.run(inputs)[0], evaluate(g, inputs, params)[0]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert_close(got, want, "f32")


def test_two_core_route_runs_on_one_thread_next_to_multithreaded_gemms(monkeypatch):
    """rows2 is built as rows in a graph whose GEMMs OpenBLAS may thread (their spinning
    threads stall an OpenMP region), and as rows2 where every GEMM is small."""
    _force(monkeypatch, "rows2")
    rng = np.random.default_rng(9)
    for hidden, two_cores in [(8, True), (512, False)]:
        g = Graph("conv_fc")
        x = g.input("x", (1, 3, 16, 16))
        h = g.relu(g.conv(x, g.param("w", (16, 3, 3, 3)), pads=1))
        flat = g.reshape(h, (1, 16 * 16 * 16))
        g.set_outputs([g.matmul(flat, g.param("fc", (16 * 16 * 16, hidden)))])
        params = {"w": _rand(rng, 16, 3, 3, 3), "fc": _rand(rng, 16 * 16 * 16, hidden) * 0.01}
        compiled = Session("cpu").compile(g)
        compiled.set_params(params)
        names = [getattr(c.fn, "__name__", "") for _, cs in compiled.executable._runs._planned(lambda c: c)
                 for c in cs]
        assert ("rows_conv_while_quiet" in names) == two_cores
        inputs = {"x": _rand(rng, 1, 3, 16, 16)}
        assert_close(compiled.run(inputs)[0], evaluate(g, inputs, params)[0], "f32")


def test_two_cores_are_raced_in_the_background(monkeypatch, tmp_path):
    """Where rows wins, the compile takes rows2 at once (its two-core kernel compiled
    when calls come) and asks the background planner to race rows2 against rows (on a
    quiet machine only); a stored rows is then used."""
    from rlx_cpu import cache, load, planner
    monkeypatch.setattr(cache, "kernel_dir", lambda: tmp_path)
    monkeypatch.setattr(conv, "_decisions", cache.Decisions())
    monkeypatch.setattr(conv, "_fastest_route", lambda geometry, routes: "rows")
    requested = []
    monkeypatch.setattr(planner.Planner, "request", lambda self, decisions, key, measure: requested.append(
        (key, measure)))
    g = Graph("conv")
    x = g.input("x", (1, 8, 12, 12))
    g.set_outputs([g.conv(x, g.param("w", (16, 8, 3, 3)), pads=1)])
    node = g.nodes[-1]
    assert conv.conv_route(node, g) == "rows2"
    (key, measure), = [(k, m) for k, m in requested if k.endswith(":two-cores")]
    monkeypatch.setattr(load.MachineLoad, "state", lambda self: load.LOADED)
    assert measure() is None  # loaded: not a clean measurement, tried again later
    monkeypatch.setattr(load.MachineLoad, "state", lambda self: load.QUIET)
    assert measure() in ("rows", "rows2")
    conv._decisions.set(key, "rows")
    assert conv.conv_route(node, g) == "rows"


@pytest.mark.parametrize("kernel,pads,dilations", [((3, 3), (1, 1, 1, 1), (1, 1)), ((5, 2), (2, 0, 1, 1), (2, 3))])
def test_float64_takes_the_direct_route(monkeypatch, kernel, pads, dilations):
    """float64 has no SIMD route: the direct kernel (unit strides) against the reference."""
    _force(monkeypatch, "direct")
    rng = np.random.default_rng(10)
    g = Graph("conv64")
    x = g.input("x", (2, 5, 11, 13), "f64")
    g.set_outputs([g.relu(g.conv(x, g.param("w", (6, 5) + kernel, "f64"), g.param("b", (6,), "f64"), pads=pads,
                                 dilations=dilations))])
    params = {"w": rng.standard_normal((6, 5) + kernel), "b": rng.standard_normal(6)}
    inputs = {"x": rng.standard_normal((2, 5, 11, 13))}
    compiled = Session("cpu").compile(g)
    compiled.set_params(params)
    assert "direct" in conv._Geometry(g.nodes[-2], g).routes() and conv.conv_route(g.nodes[-2], g) == "direct"
    assert_close(compiled.run(inputs)[0], evaluate(g, inputs, params)[0], "f64")

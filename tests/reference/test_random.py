"""The rng kernels against onnxruntime (``ort`` mode must be bit for bit) and against
scipy's distribution tests (``philox`` mode must be uniform / normal)."""
import numpy as np
import pytest

from rlx_core import Graph, RngOptions, evaluate
from rlx_core.testing.external import run_onnx_graph

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

ort.set_default_logger_severity(3)
ORT_TYPES = {"f32": TensorProto.FLOAT, "f64": TensorProto.DOUBLE}
ONNX_OP = {"rng_uniform": "RandomUniform", "rng_normal": "RandomNormal"}
PARAMS = {"rng_uniform": {"low": -1.5, "high": 0.75}, "rng_normal": {"mean": 0.25, "scale": 1.5}}


def _ort_run(nodes, inputs=None):
    """Run ONNX nodes producing outputs y0, y1, ... on onnxruntime's CPU provider."""
    return run_onnx_graph(nodes, inputs or {}, [f"y{i}" for i in range(len(nodes))], opset=17)


def _rlx(kind, dims, dtype, seed=None, key=0):
    g = Graph("rng")
    g.set_outputs(getattr(g, kind)(dims, dtype=dtype, seed=seed, key=key, **PARAMS[kind]))
    return g


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("kind", ["rng_uniform", "rng_normal"])
def test_ort_mode_matches_onnxruntime_bit_for_bit(kind, dtype):
    # ONNX seeds are float attributes: RLX's integer seed is the f32-rounded value.
    seeds = list(range(0, 120, 7)) + [2**31 - 2, 2**31, 4e9, -7, 1_000_003]
    for i, seed in enumerate(seeds):
        n = (1, 2, 7, 100, 4097)[i % 5]
        node = helper.make_node(ONNX_OP[kind], [], ["y0"], shape=[n], dtype=ORT_TYPES[dtype], seed=float(seed),
                                **PARAMS[kind])
        (want,) = _ort_run([node])
        (got,) = evaluate(_rlx(kind, (n,), dtype, seed=int(np.float32(seed))), rng=RngOptions(mode="ort"))
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} {dtype} seed={seed} n={n}")


def _ort_unseeded(nodes, global_seed):
    """Run unseeded nodes: onnxruntime seeds node i with (global seed + i) mod 2**32."""
    ort.set_seed(global_seed)
    try:
        return _ort_run(nodes)
    finally:
        ort.set_seed(0)


def test_ort_mode_clamps_like_generate_canonical():
    m = 2**31 - 1
    seed = (m - 1) * pow(16807, -1, m) % m  # the first draw rounds up to 1.0 before the clamp
    node = helper.make_node("RandomUniform", [], ["y0"], shape=[3], dtype=TensorProto.FLOAT)
    (want,) = _ort_unseeded([node], seed)  # (a float seed attribute cannot hold this seed)
    g = Graph("clamp")
    g.set_outputs(g.rng_uniform((3,), key=0))
    (got,) = evaluate(g, rng=RngOptions(seed=seed, mode="ort"))
    np.testing.assert_array_equal(got, want)
    assert got[0] == np.nextafter(np.float32(1), np.float32(0))


@pytest.mark.parametrize("kind", ["rng_uniform", "rng_normal"])
def test_like_variants_take_the_template_shape(kind):
    x = np.zeros((3, 4), np.float32)
    node = helper.make_node(ONNX_OP[kind] + "Like", ["x"], ["y0"], seed=5.0, **PARAMS[kind])
    (want,) = _ort_run([node], {"x": x})
    g = Graph("like")
    xv = g.input("x", (3, 4))
    g.set_outputs(getattr(g, kind)(like=xv, seed=5, **PARAMS[kind]))
    (got,) = evaluate(g, {"x": x}, rng=RngOptions(mode="ort"))
    np.testing.assert_array_equal(got, want)


def test_ort_mode_without_seed_is_global_seed_plus_node_index():
    # onnxruntime seeds an unseeded node with (global seed + node index); RLX with
    # (RngOptions.seed + key): an importer that sets key = node index reproduces it.
    nodes = [helper.make_node("RandomNormal", [], [f"y{i}"], shape=[9], dtype=TensorProto.FLOAT) for i in range(3)]
    want = _ort_unseeded(nodes, 1234)
    g = Graph("unseeded")
    g.set_outputs([g.rng_normal((9,), key=i) for i in range(3)])
    got = evaluate(g, rng=RngOptions(seed=1234, mode="ort"))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["philox", "ort"])
def test_distributions(mode):
    stats = pytest.importorskip("scipy.stats")
    g = Graph("dist")
    g.set_outputs([g.rng_uniform((200_000,), low=-1.0, high=3.0), g.rng_normal((100_001,), mean=2.0, scale=0.5)])
    u, z = evaluate(g, rng=RngOptions(seed=2024, mode=mode))
    assert stats.kstest(u, stats.uniform(loc=-1, scale=4).cdf).pvalue > 1e-3
    assert stats.kstest(z, stats.norm(loc=2, scale=0.5).cdf).pvalue > 1e-3
    assert u.min() >= -1 and u.max() < 3


def test_low_precision_outputs_are_rounded_f32_draws():
    g = Graph("low")
    g.set_outputs([g.rng_uniform((50,), dtype=t, key=1) for t in ("f32", "f16", "bf16", "f64")])
    for mode in ("philox", "ort"):
        f32, f16, bf16, f64 = evaluate(g, rng=RngOptions(mode=mode))
        np.testing.assert_array_equal(f16, f32.astype(np.float16))
        np.testing.assert_array_equal(bf16, f32.astype(bf16.dtype))
        if mode == "philox":
            np.testing.assert_array_equal(f64, f32.astype(np.float64))

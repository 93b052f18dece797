"""The cost model: FLOP rules, byte counts, fusion, the time formula, and ranking."""
import pytest

from rlx_core import Graph, Shape
from rlx_core.runtime import Device
from rlx_core.select import DeviceFigures, DevicePolicy, estimate_ns, graph_cost, node_flops, rank_devices

S = Shape


def figures(**kw):
    base = dict(sgemm_gflops=100.0, memory_bw_gbps=10.0, roundtrip_overhead_ns=1000.0, dispatch_overhead_ns=100.0,
                vector_gflops=10.0)
    return DeviceFigures(**{**base, **kw})


# --- FLOP rules (shapes only: these kinds may not be installed yet) -------------------------
def test_matmul_flops_are_2mkn_with_batch():
    assert node_flops("matmul", [S((64, 32)), S((32, 16))], [S((64, 16))]) == 2 * 64 * 32 * 16
    assert node_flops("matmul", [S((3, 8, 4)), S((3, 4, 5))], [S((3, 8, 5))]) == 3 * 2 * 8 * 4 * 5


def test_conv_and_transposed_conv_flops():
    # NCHW x [Cout, Cin/groups, kh, kw] -> out [1, 8, 30, 30]
    assert node_flops("conv", [S((1, 3, 32, 32)), S((8, 3, 3, 3))], [S((1, 8, 30, 30))]) == 2 * 8 * 900 * 27
    assert node_flops("conv_transpose2d", [S((1, 4, 8, 8)), S((4, 2, 3, 3))], [S((1, 2, 10, 10))]) \
        == 2 * 256 * 18


def test_attention_flops_count_both_products_and_softmax():
    q, k, v = S((2, 8, 16, 8)), S((2, 2, 32, 8)), S((2, 2, 32, 4))  # GQA: 8 query heads, 2 KV heads
    scores = 2 * 8 * 16 * 32
    assert node_flops("attention", [q, k, v], [S((2, 8, 16, 4))]) == scores * (2 * 8 + 2 * 4 + 5)


def test_dense_solve_flops():
    a, b = S((10, 10)), S((10, 3))
    assert node_flops("dense_solve", [a, b], [b]) == pytest.approx(2 / 3 * 1000 + 2 * 100 * 3)


def test_fft_flops_are_5_n_log_n_per_transform():
    g = Graph("fft")
    x = g.input("x", S((4, 1024), "f32"))
    spectrum = g.rfft(x)
    g.set_outputs([g.irfft(spectrum, n=1024), g.fft(g.cast(x, "c64"), n=2048)])
    flops = {n.kind: n.flops for n in graph_cost(g).nodes}
    assert flops["rfft"] == pytest.approx(4 * 2.5 * 1024 * 10)
    assert flops["irfft"] == pytest.approx(4 * 2.5 * 1024 * 10)
    assert flops["fft"] == pytest.approx(5 * 4 * 2048 * 11)


def test_pool_counts_the_window():
    assert node_flops("pool2d", [S((1, 2, 8, 8))], [S((1, 2, 4, 4))], {"kernel": (2, 2)}) == 32 * 4


def test_other_kinds_use_documented_defaults():
    x = S((100,))
    assert node_flops("add", [x, x], [x]) == 100
    assert node_flops("tanh", [x], [x]) == 800
    assert node_flops("reduce_sum", [S((10, 10))], [S((10,))]) == 100
    assert node_flops("reshape", [x], [S((10, 10))]) == 0
    assert node_flops("some_future_kind", [x], [S((7,))]) == 7


# --- graph counting and the time formula -----------------------------------------------------
def chain(n=1000, length=3, dtype="f32"):
    g = Graph("chain")
    x = g.input("x", S((n,), dtype))
    y = x
    for _ in range(length):
        y = g.tanh(y)
    g.set_outputs([y])
    return g


def test_graph_cost_counts_real_dtype_bytes():
    cost = graph_cost(chain(1000, 3, "f64"))
    assert len(cost.nodes) == 3
    assert cost.bytes == 3 * (8000 + 8000)
    assert cost.input_bytes == cost.output_bytes == 8000
    assert cost.flops == 3 * 8000
    assert cost.by_kind() == {"tanh": (3, 24000.0)}


def test_estimate_is_roundtrip_plus_dispatch_plus_roofline():
    cost = graph_cost(chain(1000, 3))
    f = figures()
    per_node = 100.0 + max(8000 / 10.0, 8000 / 10.0)
    assert estimate_ns(cost, f) == pytest.approx(1000.0 + 3 * per_node)
    slow_math = figures(vector_gflops=1.0)
    assert estimate_ns(cost, slow_math) == pytest.approx(1000.0 + 3 * (100.0 + 8000.0))


def test_transfer_term_for_discrete_devices():
    cost = graph_cost(chain(1000, 1))
    assert estimate_ns(cost, figures(transfer_bw_gbps=2.0)) - estimate_ns(cost, figures()) \
        == pytest.approx((4000 + 4000) / 2.0)


def test_fusing_backends_skip_dispatch_and_traffic_inside_chains():
    cost = graph_cost(chain(1000, 4))
    plain, fused = figures(vector_gflops=1e6), figures(vector_gflops=1e6, fuses_elementwise=True)
    # unfused: 4 dispatches, 4 x (4000 read + 4000 written); fused: 1 dispatch, 4000 in + 4000 out,
    # and the two middle nodes cost only their (tiny) compute
    assert estimate_ns(cost, plain) == pytest.approx(1000 + 4 * (100 + 800))
    assert estimate_ns(cost, fused) == pytest.approx(1000 + 100 + 400 + 2 * 8000 / 1e6 + 400)


def test_outputs_and_shared_values_are_not_fused_away():
    g = Graph("fanout")
    x = g.input("x", S((1000,), "f32"))
    a = g.exp(x)
    g.set_outputs([g.tanh(a), g.sin(a)])  # a has two users: it must be materialised
    cost = graph_cost(g)
    fused = figures(fuses_elementwise=True, vector_gflops=1e9)
    assert estimate_ns(cost, fused) == pytest.approx(1000 + 3 * 100 + (4000 + 4000) / 10 + 2 * (4000 + 4000) / 10)


def test_timed_kinds_replace_flop_rates_and_interpolate_by_size():
    f = figures(kind_ns_per_element={"tanh": [2.0, 8.0]}, kind_probe_sizes=(1 << 10, 1 << 20),
                memory_bw_gbps=1e9)
    small, mid, big = (graph_cost(chain(n, 1)).nodes[0] for n in (512, 1 << 15, 1 << 22))
    assert f.compute_ns(small) == 512 * 2.0
    assert f.compute_ns(mid) == pytest.approx((1 << 15) * 5.0)  # halfway in log2 between the probes
    assert f.compute_ns(big) == (1 << 22) * 8.0
    assert f.compute_ns(graph_cost(chain(512, 1)).nodes[0]) == 512 * 2.0


def test_timed_dispatch_replaces_the_generic_one():
    cost = graph_cost(chain(10, 2))
    f = figures(memory_bw_gbps=1e9, vector_gflops=1e9)
    assert estimate_ns(cost, f) == pytest.approx(1000 + 2 * 100, rel=1e-3)
    timed = figures(memory_bw_gbps=1e9, vector_gflops=1e9, kind_dispatch_ns={"tanh": 2500.0, "exp": 1.0})
    assert estimate_ns(cost, timed) == pytest.approx(1000 + 2 * 2500, rel=1e-3)


def test_f64_gemm_is_half_rate():
    f = figures()
    assert f.rate("gemm", Shape((1,), "f64").dtype) == 50.0
    assert f.rate("gemm", Shape((1,), "f32").dtype) == 100.0
    assert f.rate("vector", Shape((1,), "f64").dtype) == 10.0


# --- ranking -------------------------------------------------------------------------------
def test_rank_orders_by_estimate(fakes, helpers):
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0, dispatch=10.0, vector=1e4, bw=1e3)
    helpers.write_calibration("cpu", "cpu", roundtrip=5000.0, dispatch=5000.0)
    ranked = rank_devices(helpers.tanh_graph(), ["cpu", "gpu"])
    assert [d for d, _ in ranked] == [Device("gpu"), Device("cpu")]
    assert ranked[0][1] < ranked[1][1]


def test_ties_break_on_prefer_then_platform_priority(fakes, helpers):
    for dev, name in (("cpu", "cpu"), ("gpu", "fake-gpu"), ("rocm", "fake-rocm")):
        helpers.write_calibration(dev, name)
    g = helpers.add_graph()  # one op: whether a device fuses elementwise chains cannot matter
    assert rank_devices(g, ["cpu", "gpu", "rocm"])[0][0] == Device("rocm")  # DEVICE_PRIORITY
    preferred = DevicePolicy.all().with_prefer(["cpu", "gpu"])
    assert [d.label for d, _ in rank_devices(g, ["cpu", "gpu", "rocm"], preferred)] == ["cpu", "gpu", "rocm"]


def test_prefer_does_not_override_a_clear_cost_difference(fakes, helpers):
    helpers.write_calibration("gpu", "fake-gpu", roundtrip=100.0, dispatch=10.0)
    helpers.write_calibration("cpu", "cpu", roundtrip=50_000.0)
    preferred = DevicePolicy.all().with_prefer(["cpu"])
    assert rank_devices(helpers.tanh_graph(), ["cpu", "gpu"], preferred)[0][0] == Device("gpu")

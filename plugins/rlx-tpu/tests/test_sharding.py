"""Graphs sharded over a mesh of devices: data parallel (the batch axis), tensor parallel
(matmul and conv weights split over a mesh axis) and both at once, on the standard
models of ``rlx_core.models``. On XLA:CPU the conftest shows 8 host devices.

Every sharded run equals the unsharded program's (collectives only reorder sums), and
the HLO XLA compiled holds the collectives the sharding implies: the all-reduce after a
row-parallel matmul, the all-gather of gathered outputs, none where nothing is split.
"""
import json
import re
from collections import Counter

import jax
import numpy as np
import pytest

from rlx_core import CompileOptions, Graph, RngOptions, Session, models
from rlx_core.errors import ShardingError
from rlx_core.runtime.sharding import Sharding, mlp_rules, transformer_rules
from rlx_core.testing import assert_close
from rlx_tpu import platform

PLATFORM = platform.requested_platform()
MESH = 8
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

@pytest.fixture(scope="module", autouse=True)
def eight_devices():
    """A mesh of 8: XLA:CPU shows them (the conftest's XLA_FLAGS) unless JAX started before
    the conftest set the flag, which this names; other platforms skip with fewer."""
    seen = len(jax.devices(PLATFORM))
    if PLATFORM != "cpu" and seen < MESH:
        pytest.skip(f"the sharding tests need {MESH} '{PLATFORM}' devices; JAX sees {seen}")
    assert seen >= MESH, (f"JAX sees {seen} '{PLATFORM}' device(s), the sharding tests need {MESH}: JAX started "
                          f"before plugins/rlx-tpu/tests/conftest.py set XLA_FLAGS; run these tests on their own")


def collectives(compiled) -> Counter:
    """How many of each collective the compiled HLO holds (async ``-start`` forms included)."""
    text = compiled.executable.hlo()
    return Counter({kind: len(re.findall(rf"\s{kind}(?:-start)?\(", text)) for kind in COLLECTIVES})


def compile_pair(graph, params, sharding, **options):
    """(unsharded, sharded) compiles of ``graph`` with ``params`` set."""
    pair = []
    for mesh in (None, sharding):
        compiled = Session("tpu", mesh=mesh).compile(graph, CompileOptions(**options))
        compiled.set_params(params)
        pair.append(compiled)
    return pair


def check_equal(graph, params, sharding, seed=0, **options):
    """Run ``graph`` unsharded and sharded on the same inputs; the sharded compile."""
    plain, sharded = compile_pair(graph, params, sharding, **options)
    x = models.example_inputs(graph, seed)
    for want, got, name in zip(plain.run(x), sharded.run(x), graph.output_names):
        assert isinstance(got, np.ndarray) and got.shape == want.shape
        assert_close(got, want, graph.output_shapes[0].dtype, 2, what=f"{graph.name} {name} sharded vs unsharded")
    return sharded


# --- the standard models ----------------------------------------------------------------
MODEL_CASES = {
    "mlp_dp": (lambda: models.mlp(batch=16), Sharding({"data": 8}, batch_axis="data")),
    "mlp_tp": (lambda: models.mlp(batch=4), Sharding({"model": 8}, params=mlp_rules(2))),
    "block_dp": (lambda: models.transformer_block(batch=8, seq=16, d_model=64, heads=4, ffn=128),
                 Sharding({"data": 8}, batch_axis="data")),
    "block_tp": (lambda: models.transformer_block(batch=2, seq=16, d_model=64, heads=8, ffn=128),
                 Sharding({"model": 8}, params=transformer_rules())),
    "block_dp_tp": (lambda: models.transformer_block(batch=4, seq=16, d_model=64, heads=4, ffn=128, dtype="bf16"),
                    Sharding({"data": 2, "model": 4}, batch_axis="data", params=transformer_rules())),
    "cnn_dp": (lambda: models.small_cnn(batch=8, size=16), Sharding({"data": 8}, batch_axis="data")),
    "cnn_dp_tp": (lambda: models.small_cnn(batch=2, size=16),
                  Sharding({"data": 2, "model": 4}, batch_axis="data",
                           params={"conv*.w": ("model",), "conv*.b": ("model",)})),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_sharded_models_equal_unsharded(case):
    build, sharding = MODEL_CASES[case]
    graph, params = build()
    sharded = check_equal(graph, params, sharding)
    found = collectives(sharded)
    assert found["all-reduce"] > 0 if "tp" in case else found["all-reduce"] == 0, found
    if case.endswith("_dp"):  # each device holds a slice of the batch, gathered at the end
        assert found["all-gather"] >= 1, found


def test_row_parallel_matmul_all_reduces_and_column_parallel_gathers():
    rng = np.random.default_rng(0)
    params = {"fc0.w": rng.standard_normal((16, 32), np.float32), "fc1.w": rng.standard_normal((32, 8), np.float32)}
    g = Graph("column")
    g.set_outputs([g.input("x", (4, 16)) @ g.param("fc0.w", (16, 32))])
    column = check_equal(g, {"fc0.w": params["fc0.w"]}, Sharding({"model": 8}, params={"fc0.w": (None, "model")}))
    assert collectives(column) == Counter({"all-gather": 1}), collectives(column)  # the output's columns
    g = Graph("megatron")
    g.set_outputs([g.relu(g.input("x", (4, 16)) @ g.param("fc0.w", (16, 32))) @ g.param("fc1.w", (32, 8))])
    megatron = check_equal(g, params, Sharding({"model": 8}, params={"fc0.w": (None, "model"),
                                                                     "fc1.w": ("model", None)}))
    assert collectives(megatron) == Counter({"all-reduce": 1}), collectives(megatron)  # the partial products


# --- params, inputs and outputs --------------------------------------------------------
def test_params_are_placed_once_per_shard():
    graph, params = models.transformer_block(batch=2, seq=16, d_model=64, heads=8, ffn=128)
    compiled = Session("tpu", mesh=Sharding({"data": 2, "model": 4}, batch_axis="data",
                                            params=transformer_rules())).compile(
        graph, CompileOptions(backend={"outputs": "jax"}))
    compiled.set_params(params)
    placed = compiled.executable._params
    w = placed["ffn.in.w"]  # [64, 128], columns split 4 ways, replicated over "data"
    assert len(w.addressable_shards) == MESH and {s.data.shape for s in w.addressable_shards} == {(64, 32)}
    assert {s.data.shape for s in placed["ffn.out.w"].addressable_shards} == {(32, 64)}
    assert placed["ln1.gamma"].sharding.is_fully_replicated
    mesh = compiled.executable.program.placement.mesh
    x = jax.device_put(models.example_inputs(graph)["x"],
                       jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
    with jax.transfer_guard_host_to_device("disallow"):  # nothing is uploaded per run
        out = compiled.run({"x": x})[0]
    assert out.sharding.is_fully_replicated and len(out.devices()) == MESH


def test_outputs_gathered_or_left_sharded():
    graph, params = models.mlp(batch=16, sizes=(32, 64, 16))
    x = models.example_inputs(graph)["x"]
    outs = {}
    for mode in ("gathered", "sharded"):
        compiled = Session("tpu").compile(graph, CompileOptions(
            sharding=Sharding({"data": 8}, batch_axis="data", outputs=mode), backend={"outputs": "jax"}))
        compiled.set_params(params)
        outs[mode] = (compiled.run({"x": x})[0], collectives(compiled))
    gathered, sharded = outs["gathered"][0], outs["sharded"][0]
    assert gathered.sharding.is_fully_replicated and outs["gathered"][1]["all-gather"] >= 1
    assert {s.data.shape for s in sharded.addressable_shards} == {(2, 16)} and sum(outs["sharded"][1].values()) == 0
    np.testing.assert_array_equal(np.asarray(sharded), np.asarray(gathered))  # the host assembles the shards


def test_inputs_of_every_placement_are_split_as_the_program_takes_them():
    graph, params = models.mlp(batch=16, sizes=(32, 64, 16))
    x = models.example_inputs(graph)["x"]
    plain, sharded = compile_pair(graph, params, Sharding({"data": 8}, batch_axis="data"))
    want = plain.run({"x": x})[0]
    for given in (x, jax.numpy.asarray(x), jax.device_put(x, jax.devices(PLATFORM)[3])):
        assert_close(sharded.run({"x": given})[0], want, "f32")


def test_input_rules_override_the_batch_axis():
    g = Graph("masked")
    x, bias = g.input("x", (8, 4)), g.input("bias", (3, 4))  # "bias" has no batch dim
    g.set_outputs([g.sum(x, axes=(0,)) + bias])
    with pytest.raises(ShardingError, match=r"input 'bias' \[3, 4\]: dim 0 \(3\) does not split into 8 .*inputs rule"):
        Session("tpu", mesh={"data": 8}).compile(g)
    sharding = Sharding({"data": 8}, batch_axis="data", inputs={"bias": ()})
    sharded = check_equal(g, {}, sharding)
    assert collectives(sharded)["all-reduce"] == 1  # the sum over the split batch


def test_random_numbers_do_not_depend_on_the_sharding():
    g = Graph("noisy")
    x = g.input("x", (8, 16))
    g.set_outputs([x + g.rng_normal(like=x)])
    check_equal(g, {}, Sharding({"data": 8}, batch_axis="data"), rng=RngOptions(seed=7))


def test_programs_are_cached_per_sharding():
    graph, params = models.mlp(batch=16, sizes=(32, 64, 16))
    dp = Sharding({"data": 8}, batch_axis="data")
    a, b = (Session("tpu", mesh=dp).compile(graph) for _ in range(2))
    c = Session("tpu", mesh=Sharding({"data": 4}, batch_axis="data")).compile(graph)
    assert a.executable.program is b.executable.program is not c.executable.program
    assert c.executable.program.placement.device_count == 4


# --- errors -----------------------------------------------------------------------------
def test_sharding_errors_name_what_does_not_fit():
    graph, _ = models.mlp(batch=16, sizes=(32, 64, 16))
    with pytest.raises(ShardingError, match=r"mesh \{'data': 16\} spans 16 devices; JAX sees 8 .*"
                                            + ("xla_force_host_platform_device_count" if PLATFORM == "cpu" else "")):
        Session("tpu", mesh={"data": 16}).compile(graph)
    with pytest.raises(ShardingError, match="device_index=1 and sharding exclude each other"):
        Session("tpu", mesh={"data": 8}).compile(graph, CompileOptions(sharding={"data": 8},
                                                                       backend={"device_index": 1}))
    with pytest.raises(ShardingError, match=r"param rule 'fc9.w' matches no param of graph .*fc0.w, fc0.b"):
        Session("tpu", mesh=Sharding({"model": 8}, params={"fc9.w": (None, "model")})).compile(graph)
    with pytest.raises(ShardingError, match=r"param 'fc1.w' \[64, 16\]: rule 'fc1.w' gives 3 dims"):
        Session("tpu", mesh=Sharding({"model": 8}, params={"fc1.w": (None, None, "model")})).compile(graph)
    with pytest.raises(ShardingError, match=r"param 'fc0.b' \[64\]: dim 0 \(64\) does not split into 128 "):
        Session("tpu", mesh=Sharding({"a": 8, "b": 16}, params={"fc0.b": (("a", "b"),)})).compile(graph)


# --- the benchmark ----------------------------------------------------------------------
def test_sharding_benchmark_runs_every_path_and_writes_its_results(tmp_path):
    from pathlib import Path

    from rlx_core.testing.scripts import load_script
    bench = load_script(Path(__file__).resolve().parents[3] / "benchmarks" / "tpu_sharding_bench.py")
    out = tmp_path / "sharding.json"
    assert bench.main(["--seq", "8", "--d-model", "64", "--dtype", "f32", "--repeats", "2", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["devices"] == MESH and set(result["median_ms"]) == {"rlx_1", "jax_1", "rlx_dp", "jax_dp", "rlx_tp", "jax_tp"}
    assert result["collectives"]["rlx_tp"] == result["collectives"]["jax_tp"] and \
        result["collectives"]["rlx_tp"]["all-reduce"] >= 2  # the two row-parallel products
    assert max(result["max_abs_diff_vs_rlx_1"].values()) < 1e-4 * result["output_scale"]
    assert "| data parallel |" in out.with_suffix(".md").read_text()

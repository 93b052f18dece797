"""The sharding spec of the core (``rlx_core.runtime.sharding``): normalising and checking
a spec, planning it over a graph, and its refusal by backends that cannot shard. The
sharded runs themselves are rlx-tpu's (plugins/rlx-tpu/tests/test_sharding.py)."""
import pytest

from rlx_core import CompileOptions, Graph, Session, ShardingError, models
from rlx_core.runtime import Sharding
from rlx_core.runtime.sharding import column_parallel, mlp_rules, row_parallel, transformer_rules


def test_a_spec_is_normalised_hashable_data():
    s = Sharding({"data": 2, "model": 4}, batch_axis="data", params={"*.w": [None, "model"]})
    assert s.mesh == (("data", 2), ("model", 4)) and s.devices == 8 and s.axis_names == ("data", "model")
    assert s.params == (("*.w", (None, "model")),) and hash(s) == hash(Sharding(**vars(s)))
    assert Sharding.of({"data": 8}) == Sharding({"data": 8}, batch_axis="data")
    assert CompileOptions(sharding={"data": 8}).sharding == Sharding.of({"data": 8})
    assert Session("cpu", mesh={"data": 2}).options.sharding.batch_axis == "data"


def test_the_sharding_is_part_of_the_compile_cache_key():
    plain = CompileOptions()
    assert "sharding" not in plain.cache_key()  # unsharded keys are what they were
    assert plain.with_(sharding={"data": 2}).cache_key() != plain.with_(sharding={"data": 4}).cache_key()


@pytest.mark.parametrize("kwargs, message", [
    ({"mesh": {}}, "mesh must be a non-empty mapping"),
    ({"mesh": {"data": 0}}, "mesh axis 'data' has size 0; expected an integer >= 1"),
    ({"mesh": {"data": 2}, "batch_axis": "batch"}, r"batch_axis 'batch' is not a mesh axis; the mesh has \['data'\]"),
    ({"mesh": {"data": 2}, "params": {"w": "data"}}, r"a spec is a tuple .* \(for the first dim write \('data',\)\)"),
    ({"mesh": {"data": 2}, "params": {"w": (None, "model")}}, r"names mesh axes \['model'\] the mesh lacks"),
    ({"mesh": {"data": 2}, "params": {"w": ("data", "data")}}, "uses a mesh axis twice"),
    ({"mesh": {"data": 2}, "inputs": {"x": (3,)}}, "a spec entry is None, a mesh axis name or a tuple of them"),
    ({"mesh": {"data": 2}, "outputs": "scattered"}, "outputs='scattered'; expected one of gathered, sharded"),
])
def test_malformed_specs_say_what_is_wrong(kwargs, message):
    with pytest.raises(ShardingError, match=message):
        Sharding(**kwargs)


def test_plan_gives_every_value_its_checked_spec():
    graph, _ = models.transformer_block(batch=4, seq=8, d_model=32, heads=4, ffn=64)
    plan = Sharding({"data": 2, "model": 4}, batch_axis="data", params=transformer_rules()).plan(graph)
    assert plan.inputs == {"x": ("data",)}
    assert plan.params["attn.in.w"] == (None, "model") and plan.params["attn.in.b"] == ("model",)
    assert plan.params["ffn.out.w"] == ("model", None) and plan.params["ln2.gamma"] == ()
    with pytest.raises(ShardingError, match=r"input 'x' \[4, 8, 32\]: dim 0 \(4\) does not split into 8 .*"
                                            r"\(batch_axis 'data'\)"):
        Sharding({"data": 8}, batch_axis="data").plan(graph)


def test_megatron_rule_helpers():
    assert column_parallel("fc0") == {"fc0.w": (None, "model"), "fc0.b": ("model",)}
    assert row_parallel("fc1", "tp") == {"fc1.w": ("tp", None)}
    assert set(mlp_rules(3)) == {"fc0.w", "fc0.b", "fc1.w", "fc2.w", "fc2.b"}
    graph, _ = models.mlp(batch=4, sizes=(8, 16, 16, 8))
    assert Sharding({"model": 2}, params=mlp_rules(3)).plan(graph).params["fc1.w"] == ("model", None)


def test_backends_that_cannot_shard_refuse_at_compile_time():
    g = Graph("g")
    g.set_outputs([g.relu(g.input("x", (4, 2)))])
    with pytest.raises(ShardingError, match=r"backend 'cpu' \(cpu\) cannot shard a graph over devices; "
                                            r".*needs a backend with the 'sharding' capability"):
        Session("cpu", mesh={"data": 2}).compile(g)
    with pytest.raises(ShardingError, match="backend 'cpu'"):  # the session's mesh is kept with other options
        Session("cpu", mesh={"data": 2}).compile(g, CompileOptions(precision="f32"))

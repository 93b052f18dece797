"""DevicePolicy: every builder method and every RLX_* variable, including bad values."""
import pytest

from rlx_core.errors import PolicyError
from rlx_core.runtime import Device
from rlx_core.select import DevicePolicy, device_chain_from_env, device_from_env, parse_device_list

CPU, CUDA, GPU, ROCM = Device("cpu"), Device("cuda"), Device("gpu"), Device("rocm")


def test_all_allows_everything_and_picks_by_cost_model():
    p = DevicePolicy.all()
    assert p.allow is None and p.deny == () and p.prefer == () and p.pick == "cost_model"
    assert all(p.allows(d) for d in ("cpu", "cuda", "gpu", "tpu"))


def test_only_restricts_and_accepts_aliases_and_devices():
    p = DevicePolicy.only(["cpu", "nvidia", Device.GPU, "cuda:1"])
    assert p.allow == (CPU, CUDA, GPU)
    assert p.allows("cuda:1") and not p.allows("rocm")
    assert DevicePolicy.only("cpu, wgpu").allow == (CPU, GPU)


def test_deny_wins_over_allow_and_accumulates():
    p = DevicePolicy.only(["cpu", "cuda"]).with_deny(["cuda"]).with_deny("gpu;cuda")
    assert p.deny == (CUDA, GPU)
    assert not p.allows("cuda") and p.allows("cpu")
    reason, fix = p.blocker("cuda")
    assert reason == "denied by DevicePolicy" and "RLX_DENY_DEVICES" in fix
    reason, fix = p.blocker("rocm")
    assert "allow-list" in reason and "RLX_DEVICES=cpu,cuda,rocm" in fix


def test_prefer_orders_listings_then_platform_priority():
    p = DevicePolicy.all().with_prefer(["cpu"])
    assert p.order(["cpu", "gpu", "cuda"]) == [CPU, CUDA, GPU]
    assert DevicePolicy.all().order(["cpu", "gpu", "cuda"]) == [CUDA, GPU, CPU]
    assert DevicePolicy.all().with_deny(["cuda"]).order(["cpu", "cuda"]) == [CPU]


def test_benchmark_pick():
    p = DevicePolicy.all().with_benchmark_pick(7)
    assert p.pick == "benchmark" and p.benchmark_runs == 7
    assert p.with_cost_model_pick().pick == "cost_model"
    for bad in (0, -3, 2.5, True, "5"):
        with pytest.raises(PolicyError, match="run count >= 1"):
            DevicePolicy.all().with_benchmark_pick(bad)


def test_policies_are_immutable_values():
    base = DevicePolicy.only(["cpu"])
    base.with_deny(["cpu"])
    assert base.deny == ()
    assert DevicePolicy.only(["cpu"]) == base


@pytest.mark.parametrize("bad", [[], ["bogus"], "cpu,bogus", [3]])
def test_only_rejects_bad_device_lists(bad):
    with pytest.raises(PolicyError):
        DevicePolicy.only(bad)


def test_parse_device_list_separators_dedupe_and_errors():
    assert parse_device_list(" cuda ; gpu,  cpu cuda ") == (CUDA, GPU, CPU)
    assert parse_device_list("") == ()
    with pytest.raises(PolicyError, match=r"MYVAR: unknown device 'cdua'.*did you mean 'cuda'"):
        parse_device_list("cdua", "MYVAR")


# --- environment ---------------------------------------------------------------------------
def test_from_env_reads_every_variable(monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "cpu,cuda,gpu")
    monkeypatch.setenv("RLX_DENY_DEVICES", "gpu")
    monkeypatch.setenv("RLX_PREFER_DEVICES", "cpu cuda")
    monkeypatch.setenv("RLX_BENCHMARK_PICK", "12")
    monkeypatch.setenv("RLX_DEVICE", "nvidia")
    monkeypatch.setenv("RLX_DEVICE_CHAIN", "cuda;cpu")
    p = DevicePolicy.from_env()
    assert p.allow == (CPU, CUDA, GPU) and p.deny == (GPU,) and p.prefer == (CPU, CUDA)
    assert p.benchmark_runs == 12 and p.env_prefix == "RLX"
    assert p.device_hint() == CUDA and device_from_env() == CUDA
    assert p.device_chain() == (CUDA, CPU) and device_chain_from_env() == (CUDA, CPU)


def test_unset_and_blank_variables_mean_defaults(monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "   ")
    monkeypatch.setenv("RLX_BENCHMARK_PICK", "")
    p = DevicePolicy.from_env()
    assert p == DevicePolicy.all()
    assert p.device_hint() is None and p.device_chain() == ()


def test_benchmark_pick_zero_means_cost_model(monkeypatch):
    monkeypatch.setenv("RLX_BENCHMARK_PICK", "0")
    assert DevicePolicy.from_env().pick == "cost_model"


@pytest.mark.parametrize("var,value,message", [
    ("RLX_DEVICES", "cpu,bogus", r"RLX_DEVICES='cpu,bogus': unknown device 'bogus'"),
    ("RLX_DEVICES", ",;", r"RLX_DEVICES=',;' names no device"),
    ("RLX_DENY_DEVICES", "cudda", r"RLX_DENY_DEVICES='cudda': unknown device"),
    ("RLX_PREFER_DEVICES", "gpu:x", r"RLX_PREFER_DEVICES='gpu:x': device index"),
    ("RLX_BENCHMARK_PICK", "ten", r"RLX_BENCHMARK_PICK='ten': expected a run count"),
    ("RLX_BENCHMARK_PICK", "-2", r"RLX_BENCHMARK_PICK='-2'"),
    ("RLX_BENCHMARK_PICK", "1.5", r"RLX_BENCHMARK_PICK='1.5'"),
    ("RLX_FORCE_DEVICE", "cuda", r"RLX_FORCE_DEVICE is not supported.*RLX_DEVICE=cuda"),
])
def test_bad_values_raise_naming_the_variable(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(PolicyError, match=message):
        DevicePolicy.from_env()


@pytest.mark.parametrize("value,message", [("warp-drive", r"RLX_DEVICE='warp-drive': unknown device"),
                                           ("cpu,cuda", r"RLX_DEVICE='cpu,cuda' must name exactly one device")])
def test_bad_device_hint(monkeypatch, value, message):
    monkeypatch.setenv("RLX_DEVICE", value)
    with pytest.raises(PolicyError, match=message):
        device_from_env()


def test_bad_device_chain(monkeypatch):
    monkeypatch.setenv("RLX_DEVICE_CHAIN", "cuda,nope")
    with pytest.raises(PolicyError, match=r"RLX_DEVICE_CHAIN='cuda,nope': unknown device 'nope'"):
        device_chain_from_env()


def test_from_env_key_reads_its_own_prefix_only(monkeypatch):
    monkeypatch.setenv("RLX_DEVICES", "cuda")
    monkeypatch.setenv("MYAPP_DEVICES", "cpu,rocm")
    monkeypatch.setenv("MYAPP_DENY_DEVICES", "rocm")
    monkeypatch.setenv("MYAPP_PREFER_DEVICES", "rocm")
    monkeypatch.setenv("MYAPP_BENCHMARK_PICK", "3")
    monkeypatch.setenv("MYAPP_DEVICE", "cpu")
    monkeypatch.setenv("MYAPP_DEVICE_CHAIN", "rocm,cpu")
    p = DevicePolicy.from_env_key("MYAPP")
    assert p.allow == (CPU, ROCM) and p.deny == (ROCM,) and p.prefer == (ROCM,) and p.benchmark_runs == 3
    assert p.device_hint() == CPU and p.device_chain() == (ROCM, CPU)
    assert DevicePolicy.from_env_key("MYAPP_") == p  # a trailing underscore is the same prefix
    assert "MYAPP_DENY_DEVICES" in p.blocker("rocm")[1]


def test_from_env_key_errors_name_the_prefixed_variable(monkeypatch):
    monkeypatch.setenv("MYAPP_DEVICES", "tpu,zzz")
    with pytest.raises(PolicyError, match="MYAPP_DEVICES="):
        DevicePolicy.from_env_key("MYAPP")
    monkeypatch.setenv("MYAPP_FORCE_DEVICE", "cpu")
    with pytest.raises(PolicyError, match="MYAPP_FORCE_DEVICE is not supported"):
        DevicePolicy.from_env_key("MYAPP")


@pytest.mark.parametrize("prefix", ["", "MY-APP", "1APP", None])
def test_bad_prefix(prefix):
    with pytest.raises(PolicyError, match="environment prefix"):
        DevicePolicy.from_env_key(prefix)


def test_describe_is_readable():
    text = DevicePolicy.only(["cpu", "cuda"]).with_deny(["cuda"]).with_prefer(["cpu"]).with_benchmark_pick(4) \
        .describe()
    assert text == "allow=cpu,cuda deny=cuda prefer=cpu pick=benchmark(4 runs)"

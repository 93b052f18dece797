"""Lowering, fusion, memory planning, the probe, the op table and NVML -- all without a GPU."""
import types

import numpy as np
import pytest
from rlx_core import Graph
from rlx_core.ir import Ref, all_schemas
from rlx_core.reference import has_kernel

from rlx_cuda import probe as probe_mod
from rlx_cuda import runtime
from rlx_cuda.fusion import fusion_groups
from rlx_cuda.lower import COMPUTE_32F, COMPUTE_32F_FAST_TF32, LowerContext, lower_graph
from rlx_cuda.nvml import NvmlProvider
from rlx_cuda.plan import plan_memory
from rlx_cuda.steps import Gemm, Launch
from rlx_cuda.support import supported_ops


def _mlp():
    g = Graph("mlp")
    x = g.input("x", (8, 16), "bf16")
    w = g.param("w", (16, 32), "bf16")
    b = g.param("b", (32,), "bf16")
    h = g.gelu(g.matmul(x, w) + b)
    g.set_outputs([g.layer_norm(h * 2.0, np.ones(32), np.zeros(32))])
    return g


def test_elementwise_chain_is_one_kernel():
    g = _mlp()
    steps = lower_graph(LowerContext(g))
    fused = [s for s in steps if s.label.startswith("fused[")]
    assert len(fused) == 1 and fused[0].label == "fused[add,gelu,mul]"
    assert [type(a) for a in steps[0].actions] == [Gemm]
    assert len(lower_graph(LowerContext(g, fuse=False))) == len(steps) + 2


def test_fusion_never_makes_a_group_wait_for_its_own_output():
    g = Graph("diamond")
    x = g.input("x", (4, 4))
    a = g.exp(x)
    s = g.sum(a, axes=1, keepdims=True)  # a reduction between two elementwise ops of one chain
    g.set_outputs([g.add(a, s)])
    groups = fusion_groups(g)
    kinds = [[g.nodes[n].kind for n in grp] for grp in groups]
    assert kinds == [["exp"], ["reduce_sum"], ["add"]]


def test_matmul_maps_row_major_to_cublas_column_major():
    g = Graph("mm")
    a, b = g.input("a", (3, 2, 5)), g.input("b", (5, 4))
    g.set_outputs([g.matmul(a, b)])
    (step,) = lower_graph(LowerContext(g))
    (gemm,) = step.actions
    assert (gemm.m, gemm.n, gemm.k, gemm.lda, gemm.ldb, gemm.ldc) == (4, 2, 5, 4, 5, 4)
    assert (gemm.transa, gemm.transb) == (0, 0)
    assert (gemm.batch, gemm.stride_a, gemm.stride_b, gemm.stride_c) == (3, 0, 10, 8)  # B broadcast: stride 0
    assert gemm.a.ref == Ref(1) and gemm.b.ref == Ref(0)
    assert gemm.compute == COMPUTE_32F
    assert lower_graph(LowerContext(g, tf32=True))[0].actions[0].compute == COMPUTE_32F_FAST_TF32


def test_attention_is_chunked_within_the_scores_budget():
    g = Graph("attn")
    q = g.input("q", (2, 4, 64, 8))
    kv = g.input("k", (2, 2, 64, 8))
    g.set_outputs([g.attention(q, kv, kv, "causal")])
    budget = 2 * 2 * 64 * 4 * 16  # 16 query rows of scores per launch
    (step,) = lower_graph(LowerContext(g, attention_scores_bytes=budget))
    launches = [a for a in step.actions if isinstance(a, Launch)]
    assert len(launches) == 2 * (64 // 16)  # two query heads per KV head, four chunks each
    assert step.scratch <= 2 * budget


def test_arena_plan_shares_bytes_only_between_disjoint_lifetimes():
    g = _mlp()
    steps = lower_graph(LowerContext(g))
    plan = plan_memory(g, steps)
    items = list(plan.placements.values()) + list(plan.scratch.values())
    for i, p in enumerate(items):
        assert p.offset % 256 == 0
        for q in items[i + 1:]:
            if not (p.last < q.first or q.last < p.first):
                assert p.offset + p.nbytes <= q.offset or q.offset + q.nbytes <= p.offset
    assert set(plan.persistent) >= {Ref(n.id) for n in g.param_nodes}


def test_every_op_kind_is_claimed():
    kinds = {k for k, s in all_schemas().items() if has_kernel(k) and not s.custom}
    assert set(supported_ops()) == kinds | {"input", "param"}


def test_probe_reports_a_missing_cupy(monkeypatch):
    def missing():
        raise ImportError("No module named 'cupy'")
    monkeypatch.setattr(runtime, "import_cupy", missing)
    avail = probe_mod.probe()
    assert not avail.ok and "missing Python package: cupy" in avail.reason


def test_probe_reports_a_broken_cupy_and_a_missing_driver(monkeypatch):
    def broken():
        raise RuntimeError("CuPy failed to load libnvrtc.so.12")
    monkeypatch.setattr(runtime, "import_cupy", broken)
    assert "cupy failed to import" in probe_mod.probe().reason

    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver")
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_driver)))
    monkeypatch.setattr(runtime, "import_cupy", lambda: fake)
    avail = probe_mod.probe()
    assert not avail.ok and "no usable CUDA driver" in avail.reason


def test_nvml_without_pynvml_reports_no_gpus():
    def missing():
        raise ImportError("No module named 'pynvml'")
    assert NvmlProvider(loader=missing).count() == 0


def test_nvml_readings_map_units_and_missing_sensors():
    class FakeNvml:
        NVML_TEMPERATURE_GPU, NVML_CLOCK_SM = 0, 1

        def nvmlInit(self): pass
        def nvmlDeviceGetCount(self): return 1
        def nvmlDeviceGetHandleByIndex(self, i): return "h"
        def nvmlDeviceGetName(self, h): return b"NVIDIA H200"
        def nvmlDeviceGetTemperature(self, h, sensor): return 41
        def nvmlDeviceGetPowerUsage(self, h): return 123456
        def nvmlDeviceGetEnforcedPowerLimit(self, h): return 700000
        def nvmlDeviceGetFanSpeed(self, h): raise RuntimeError("not supported")
        def nvmlDeviceGetClockInfo(self, h, clock): return 1980
        def nvmlDeviceGetUtilizationRates(self, h): return types.SimpleNamespace(gpu=97)
    reading = NvmlProvider(loader=FakeNvml).read(0)
    fields = reading if isinstance(reading, dict) else reading.as_dict()
    assert fields["name"] == "NVIDIA H200" and fields["temp_c"] == 41 and fields["fan_percent"] is None
    assert fields["power_w"] == pytest.approx(123.456) and fields["power_cap_w"] == pytest.approx(700.0)
    assert fields["clock_mhz"] == 1980 and fields["util_percent"] == 97

"""The attention kernels and view folding, without a GPU.

Numbers: the generated CUDA C runs in the host emulator (``emulator.py``: g++, fibers
for threads, the documented mma/ldmatrix fragment layouts) on shapes that exercise
what the conformance cases are too small for -- several key tiles and row tiles,
blocks whose rows span two heads, GQA, causal / sliding tile skipping, odd head dims
(padded, unvectorized), key splits and their merge, strided (folded) operands -- and
is compared with the reference interpreter. Several attention nodes share one graph
so that one compiled program checks many configurations.

Sources: every kernel also compiles to a cubin for sm_90 (ptxas checks the inline PTX)
without spilling registers. Structure: lowering and view folding decisions.
"""
import numpy as np
import pytest
from rlx_core import Graph
from rlx_core.ir import Ref
from rlx_core.reference import evaluate
from rlx_core.testing.compare import mismatch_report

from rlx_cuda.kernels.attention import DecodeAttentionKernel, FlashAttentionKernel, choose_splits
from rlx_cuda.lower import LowerContext, attention_kernel, lower_graph
from rlx_cuda.steps import Launch
from rlx_cuda.views import plan_views, reshape_strides

from emulator import GXX, Emulated
from nvcc_check import NVCC, compile_cubins

needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed")

# (name, dtype, (b, hq, hkv, sq, sk, d, dv), attention kwargs, mask input dims)
CONFIGS = [
    ("causal/heads-span-blocks", "bf16", (1, 4, 2, 80, 80, 64, 64), dict(mask="causal"), None),
    ("none/partial-key-tile/dv!=d", "f16", (2, 2, 2, 20, 150, 32, 48), dict(), None),
    ("sliding/d72", "bf16", (1, 2, 1, 130, 130, 72, 40), dict(mask="sliding", window=40), None),
    ("causal/d20-unvectorized", "f16", (1, 3, 3, 33, 70, 20, 12), dict(mask="causal", scale=0.3), None),
    ("custom/broadcast", "bf16", (2, 4, 1, 17, 90, 16, 16), dict(), ("custom", (2, 1, 17, 90))),
    ("bias/softcap", "f16", (1, 2, 2, 40, 66, 32, 32), dict(softcap=3.0), ("bias", (40, 66))),
    ("causal/sk<sq", "bf16", (1, 2, 2, 70, 40, 16, 16), dict(mask="causal"), None),
    ("decode/gqa4", "bf16", (2, 8, 2, 1, 300, 64, 64), dict(mask="causal"), None),
    ("decode/sliding", "f16", (1, 4, 4, 2, 260, 32, 32), dict(mask="sliding", window=100), None),
    ("d128", "bf16", (1, 2, 2, 70, 70, 128, 128), dict(mask="causal"), None),
]
F32_CONFIGS = [
    ("f32/rows-tiles/sliding", "f32", (1, 4, 2, 20, 75, 24, 8), dict(mask="sliding", window=9), None),
    ("f64/causal", "f64", (1, 2, 1, 3, 200, 16, 16), dict(mask="causal"), None),
]


def _graph(configs):
    g = Graph("attention-configs")
    outs = []
    for n, (name, dt, (b, hq, hkv, sq, sk, d, dv), kwargs, mask) in enumerate(configs):
        q = g.input(f"q{n}", (b, hq, sq, d), dt)
        k = g.input(f"k{n}", (b, hkv, sk, d), dt)
        v = g.input(f"v{n}", (b, hkv, sk, dv), dt)
        if mask:  # a bool tensor selects the custom mode, a float one bias
            kwargs = dict(kwargs, mask=g.input(f"m{n}", mask[1], "bool" if mask[0] == "custom" else dt))
        outs.append(g.attention(q, k, v, **kwargs))
    g.set_outputs(outs)
    return g


def _feeds(g, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for node in g.input_nodes:
        shape = node.outputs[0]
        if shape.dtype.is_bool:
            feeds[node.attrs["name"]] = rng.random(shape.dims) < 0.7
        else:
            feeds[node.attrs["name"]] = rng.standard_normal(shape.dims).astype(shape.dtype.np)
    return feeds


def _check(g, configs, **ctx):
    em = Emulated(g, **ctx)
    feeds = _feeds(g)
    got, want = em.run(feeds), evaluate(g, feeds, {})
    failures = []
    for (name, dt, *_), a, e, out in zip(configs, got, want, g.output_shapes):
        report = mismatch_report(np.asarray(a), e, out.dtype, 2.0)
        if report:
            failures.append(f"{name} ({dt}): {report}")
    assert not failures, f"{ctx}:\n" + "\n".join(failures)
    return em


@needs_gxx
@pytest.mark.parametrize("ctx", [dict(attention="flash"), dict(attention="flash", attention_splits=3),
                                 dict(attention="decode"), dict(attention="decode", attention_splits=4),
                                 dict()], ids=["flash", "flash/splits3", "decode", "decode/splits4", "auto"])
def test_attention_kernels_match_the_reference(ctx):
    configs = CONFIGS + F32_CONFIGS
    g = _graph(configs)
    em = _check(g, configs, **ctx)
    kinds = {attention_kernel(em.ctx, n) for n in g.nodes if n.kind == "attention"}
    forced = ctx.get("attention")
    assert kinds == ({forced, "cublas"} if forced == "flash" else {forced} if forced else {"flash", "decode", "cublas"})


def _block(b=2, s=24, d=64, heads=4, kv_cache=0, dtype="bf16"):
    """The benchmark's transformer block shape: qkv GEMM + bias, split, head transposes,
    attention (causal, or over a KV cache), transpose back, output projection."""
    g = Graph("block")
    x = g.input("x", (b, s, d), dtype)
    w = g.input("w", (d, 3 * d), dtype)
    bias = g.input("bias", (3 * d,), dtype)
    wo = g.input("wo", (d, d), dtype)
    dh = d // heads
    qkv = g.matmul(x, w) + bias
    q, k, v = (g.transpose(g.reshape(part, (b, s, heads, dh)), (0, 2, 1, 3)) for part in g.split(qkv, [d] * 3, axis=2))
    mask = "causal"
    if kv_cache:
        k = g.concat([g.input("k_cache", (b, heads, kv_cache, dh), dtype), k], axis=2)
        v = g.concat([g.input("v_cache", (b, heads, kv_cache, dh), dtype), v], axis=2)
        mask = "none"
    a = g.reshape(g.transpose(g.attention(q, k, v, mask), (0, 2, 1, 3)), (b, s, d))
    g.set_outputs([g.matmul(a, wo) + x])
    return g


@needs_gxx
@pytest.mark.parametrize("kv_cache", [0, 37], ids=["prefill", "decode-with-cache"])
def test_transformer_block_reads_qkv_in_place_and_matches_the_reference(kv_cache):
    g = _block(s=24 if not kv_cache else 1, kv_cache=kv_cache)
    em = Emulated(g)
    labels = " ".join(em.kinds())
    assert "split" not in labels and "transpose" not in labels, labels
    feeds = _feeds(g)
    feeds["w"] = feeds["w"] / 8
    feeds["wo"] = feeds["wo"] / 8
    (got,), (want,) = em.run(feeds), evaluate(g, feeds, {})
    assert not mismatch_report(got, want, g.output_shapes[0].dtype, 2.0)
    unfolded = Emulated(g, fold_views=False)
    assert "split" in " ".join(unfolded.kinds())
    assert not mismatch_report(unfolded.run(feeds)[0], want, g.output_shapes[0].dtype, 2.0)


def test_views_fold_only_where_every_reader_reads_in_place():
    g = _block(s=16)
    ctx = LowerContext(g)
    steps = lower_graph(ctx)
    views = ctx.views
    kinds = {n.id: n.kind for n in g.nodes}
    assert {kinds[r.node] for r in views.folded} == {"split", "reshape", "transpose"}
    (t,) = [n for n in g.nodes if n.id in views.absorbed]  # attention writes [B, S, H, Dv] directly
    (attn,) = [s for s in steps if "attention" in s.label]
    assert attn.writes == (Ref(t.id),)
    assert attn.reads[0] == attn.reads[1] == attn.reads[2]  # q, k, v: all the qkv GEMM + bias output
    # a transpose read by a GEMM is materialized, and so is a graph output
    g2 = Graph("t")
    x = g2.input("x", (4, 8))
    t2 = g2.transpose(x, (1, 0))
    g2.set_outputs([g2.matmul(t2, x), g2.transpose(x, (1, 0))])
    plan = plan_views(g2, lambda node: True)
    assert not plan.folded
    # the cuBLAS attention path reads and writes contiguous memory: nothing folds into it
    ctx = LowerContext(g, attention="cublas")
    lower_graph(ctx)
    (node,) = [n for n in g.nodes if n.kind == "attention"]
    assert not any(r in ctx.views.folded for r in node.inputs) and not ctx.views.absorbed


@pytest.mark.parametrize("seed", range(40))
def test_reshape_strides_match_numpy_views(seed):
    rng = np.random.default_rng(seed)
    base = np.arange(4 * 6 * 5 * 3).reshape(4, 6, 5, 3)
    view = base.transpose(rng.permutation(4))[:, ::int(rng.integers(1, 3))]
    total = view.size
    factors = [f for f in (1, 2, 3, 4, 5, 6, 10) if total % f == 0]
    a = int(rng.choice(factors))
    new_dims = (a, total // a) if rng.random() < 0.5 else (total // a, 1, a)
    strides = tuple(s // view.itemsize for s in view.strides)
    got = reshape_strides(view.shape, strides, new_dims)
    try:
        expected = np.reshape(view, new_dims, copy=False)
    except ValueError:
        assert got is None
        return
    assert got is not None
    want = tuple(s // view.itemsize for s in expected.strides)
    assert all(g_ == w for g_, w, n in zip(got, want, new_dims) if n > 1)


def test_split_counts_fill_the_gpu_only_when_blocks_are_few():
    assert choose_splits(blocks=1024, key_tiles=64, sm_count=132, forced=None) == 1
    assert choose_splits(blocks=16, key_tiles=3, sm_count=132, forced=None) == 1
    assert choose_splits(blocks=16, key_tiles=64, sm_count=132, forced=None) == 17
    assert choose_splits(blocks=1024, key_tiles=1, sm_count=132, forced=5) == 5


def _kernels(configs, **ctx):
    g = _graph(configs)
    sources = {}
    for step in lower_graph(LowerContext(g, **ctx)):
        for act in step.actions:
            if isinstance(act, Launch):
                sources[act.source] = step.label
    return sources


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_attention_kernels_compile_to_sm90_cubins_without_spills():
    sources = {}
    for ctx in (dict(attention="flash", attention_splits=2), dict(attention="decode", attention_splits=2)):
        sources.update(_kernels(CONFIGS + F32_CONFIGS, **ctx))
    report = compile_cubins(list(sources))
    assert not report.errors, report.errors
    spills = [line for line in report.resources if "spill" in line]
    assert len(spills) == len(sources)
    assert all("0 bytes spill stores, 0 bytes spill loads" in line for line in spills), "\n".join(report.resources)


def test_lowering_picks_kernels_and_falls_back():
    g = _graph(CONFIGS + F32_CONFIGS)
    nodes = [n for n in g.nodes if n.kind == "attention"]
    picks = [attention_kernel(LowerContext(g), n) for n in nodes]
    assert picks[:7] == ["flash"] * 7 and picks[7:9] == ["decode"] * 2 and picks[9] == "flash"
    assert picks[10:] == ["cublas", "decode"]  # f32 with 40 rows per KV head: cuBLAS; f64 with 6: decode
    for n in nodes:
        assert attention_kernel(LowerContext(g, attention="cublas"), n) == "cublas"
    big = Graph("big-head")
    q = big.input("q", (1, 2, 8, 256), "bf16")
    big.set_outputs([big.attention(q, q, q)])
    (attn,) = [n for n in big.nodes if n.kind == "attention"]
    assert attention_kernel(LowerContext(big, attention="flash"), attn) == "cublas"  # D > 128


def test_flash_blocks_visit_heavy_causal_tiles_first_and_decode_tiles_fit_shared_memory():
    g = _graph(CONFIGS[:1] + CONFIGS[7:8])
    ctx = LowerContext(g, attention="flash")
    lower_graph(ctx)
    flash = FlashAttentionKernel(_problem(ctx, g, 0))
    assert flash.grid == 1 * 2 * 3 and "const int tile = 2 - block % 3;" in flash.source()
    decode = DecodeAttentionKernel(_problem(ctx, g, 1))
    assert decode.block_rows == 4 and decode.keys == 64 and decode.grid == 2 * 2


def _problem(ctx, g, index):
    from rlx_cuda.lower import _attention_problem
    return _attention_problem(ctx, [n for n in g.nodes if n.kind == "attention"][index])


@needs_gxx
def test_the_gpu_diagnostic_table_runs_its_checks(monkeypatch):
    """attention_gpu_check.py, with the emulator in place of the GPU, on a few of its
    configurations: the table is produced and every row passes (the layout probe
    included, which pins down the mma / ldmatrix fragment layouts)."""
    import types
    import attention_gpu_check as check

    class Compiled:
        def __init__(self, graph, backend):
            self.emulated = Emulated(graph, **backend)
            self.executable = types.SimpleNamespace(steps=self.emulated.steps)

        def run(self, feeds):
            return self.emulated.run(feeds)
    keep = {"layout-probe", "causal/d20-unvectorized", "decode/gqa4", "f64/causal", "block/decode-cache"}
    cases = [c for c in check._cases() if c[0] in keep]
    import rlx_cuda.probe
    monkeypatch.setattr(check, "_compile", Compiled)
    monkeypatch.setattr(check, "_cases", lambda: cases)
    monkeypatch.setattr(rlx_cuda.probe, "probe", lambda: types.SimpleNamespace(ok=True, reason=""))
    lines = []
    assert check.run(lines.append) == [], "\n".join(lines)
    table = "\n".join(lines)
    assert "n/a (falls back)" in table and "flash+combine" in table and "gemm*2+softmax" in table


def test_backend_options_reach_lowering_and_bad_ones_are_rejected(monkeypatch):
    from rlx_core import CompileOptions
    from rlx_core.errors import RlxError
    from rlx_cuda.executable import backend_options, lower_context
    g = _graph(CONFIGS[:1])
    (node,) = [n for n in g.nodes if n.kind == "attention"]
    monkeypatch.setenv("RLX_CUDA_BACKEND", '{"attention": "cublas", "fold_views": false}')
    backend = backend_options({"attention": "decode", "attention_splits": 2})  # given options win
    assert backend == {"attention": "decode", "attention_splits": 2, "fold_views": False}
    ctx = lower_context(g, CompileOptions(), backend, {"multiProcessorCount": 78, "major": 8, "minor": 6})
    assert (ctx.attention, ctx.attention_splits, ctx.fold_views, ctx.sm_count, ctx.arch) == ("decode", 2, False, 78, 86)
    pre_ampere = lower_context(g, CompileOptions(), {}, {"multiProcessorCount": 40, "major": 7, "minor": 5})
    assert attention_kernel(pre_ampere, node) == "cublas"  # no bf16 mma.sync before sm_80
    for bad, match in (({"attention": "fast"}, "attention must be one of auto, flash, decode, cublas"),
                       ({"attention_splits": 0}, "attention_splits must be an int >= 1"),
                       ({"attention_split": 2}, "unknown cuda backend option")):
        with pytest.raises(RlxError, match=match):
            backend_options(bad)
    monkeypatch.setenv("RLX_CUDA_BACKEND", "attention=cublas")
    with pytest.raises(RlxError, match="RLX_CUDA_BACKEND must be a JSON object"):
        backend_options({})


class _FakeRuntime:
    """Enough of ``runtime.Runtime`` to build a CudaExecutable without a GPU: memory is
    numpy, and NVRTC is a function that may refuse a source."""

    class _Array(np.ndarray):
        @property
        def data(self):
            import types
            return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])

    def __init__(self, refuse):
        import contextlib
        import types
        self.refuse = refuse
        self.props = {"multiProcessorCount": 132, "major": 9, "minor": 0}
        self.device = contextlib.nullcontext()
        self.cp = types.SimpleNamespace(zeros=lambda dims, dt: np.zeros(dims, dt).view(self._Array),
                                        asarray=lambda a: np.asarray(a).view(self._Array))
        self.compiled = []

    def alloc(self, nbytes):
        import types
        self._arena = np.zeros(max(nbytes, 1), np.uint8)
        return types.SimpleNamespace(ptr=self._arena.ctypes.data)

    def view(self, ptr, offset, dims, dtype):
        return np.zeros(dims, dtype).view(self._Array)

    def kernel(self, source):
        if self.refuse(source):
            raise RuntimeError("NVRTC_ERROR_COMPILATION: refused by the test")
        self.compiled.append(source)
        return lambda *args: None


def test_a_fused_attention_kernel_that_fails_to_build_falls_back_to_cublas_under_auto():
    from rlx_core import CompileOptions
    from rlx_cuda.executable import CudaExecutable
    from rlx_cuda.steps import Gemm
    g = _block(s=32)  # 32 query rows per head: the flash kernel
    rt = _FakeRuntime(refuse=lambda src: "mma.sync" in src)
    exe = CudaExecutable(g, CompileOptions(), rt)
    assert "NVRTC_ERROR_COMPILATION" in exe.attention_fallback
    (attn,) = [s for s in exe.steps if "attention" in s.label]
    assert any(isinstance(a, Gemm) for a in attn.actions)
    with pytest.raises(RuntimeError, match="refused"):  # a forced kernel reports its failure
        CudaExecutable(g, CompileOptions(backend={"attention": "flash"}), _FakeRuntime(lambda src: "mma.sync" in src))
    with pytest.raises(RuntimeError, match="refused"):  # and other kernels' failures are not masked
        CudaExecutable(g, CompileOptions(), _FakeRuntime(lambda src: "rlx_add(" in src))  # the bias add
    fine = CudaExecutable(g, CompileOptions(), _FakeRuntime(lambda src: False))
    assert fine.attention_fallback is None

"""CUDA backend benchmarks against raw cuBLAS (through CuPy) and torch, in one run.

    python benchmarks/cuda_bench.py [--quick] [--out DIR]

1. attention alone, bf16: the block's (8 x 16 heads, 512 causal, D 64), the decode
   step's (16 heads, 1 query, 129 keys) and a long GQA cache (32/8 heads, 4096 keys,
   D 128): each RLX attention kernel (flash / decode / cuBLAS path) vs torch SDPA;
2. transformer block (batch 8, seq 512, d_model 1024, 16 heads, bf16): RLX (CUDA graph)
   vs torch eager (SDPA), torch.compile and torch CUDA graphs; RLX also with the cuBLAS
   attention path and without view folding, to show what each contributes;
3. decode step (batch 1, one token, d_model 1024, 4 layers, 128 cached keys, bf16):
   RLX (CUDA graph) vs torch with CUDA graphs and torch eager (same RLX variants);
4. one-row matmuls of the decode step: RLX vs torch (eager and graphed);
5. chain of four 8192^2 bf16 matmuls: RLX vs raw cublasGemmEx (CuPy's handle) and torch.
``rlx_ms`` includes copying the inputs into the arena; ``rlx_replay_ms`` is the replay
alone (inputs already in place), which is what a torch CUDA-graph replay measures.
Every RLX output is checked against torch first. Times: median wall time per call with
device sync, after warm-up. Results go to ``DIR/cuda_bench.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn, sync, warmup=5, iters=30, burst=1) -> float:
    """Median milliseconds per call, over laps of ``burst`` calls each followed by a
    device sync (a burst > 1 hides the sync latency that dominates tiny kernels)."""
    for _ in range(warmup):
        fn()
    sync()
    laps = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        sync()
        laps.append((time.perf_counter() - t0) * 1e3 / burst)
    return statistics.median(laps)


def _rlx(graph, params, device_inputs, **backend):
    """The compiled graph, plus the timed call: the executable's run on device arrays
    (inputs copied into the arena, the captured CUDA graph replayed, outputs left in
    the arena -- what a torch CUDA-graph replay does too)."""
    from rlx_core import CompileOptions, Session
    c = Session("cuda", options=CompileOptions(backend={"outputs": "torch", **backend})).compile(graph)
    for k, v in params.items():
        c.set_param(k, v)
    args = [device_inputs[name] for name in c.input_names]
    return c, (lambda: c.executable.run_device(args))


def bench_matmul_chain(cp, torch, n: int) -> dict:
    from rlx_core import Graph
    from cupy_backends.cuda.libs import cublas
    rng = np.random.default_rng(0)
    mats = [cp.asarray((rng.standard_normal((n, n)) / math.sqrt(n)).astype(np.float32)) for _ in range(5)]
    t = [torch.from_dlpack(m).to(torch.bfloat16) for m in mats]
    bits = [cp.from_dlpack(x.view(torch.int16)).view(cp.uint16) for x in t]  # bf16 bits, shared memory
    g = Graph("matmul_chain")
    y = g.input("x", (n, n), "bf16")
    for i in range(4):
        y = g.matmul(y, g.param(f"w{i}", (n, n), "bf16"))
    g.set_outputs([y])
    c, run = _rlx(g, {f"w{i}": t[i + 1] for i in range(4)}, {"x": t[0]})
    got = c.run({"x": t[0]})[0].float()
    ref = (t[0] @ t[1] @ t[2] @ t[3] @ t[4]).float()
    err = float((got - ref).abs().max() / ref.abs().max())
    handle = cp.cuda.device.get_cublas_handle()
    outs = [cp.empty((n, n), cp.uint16) for _ in range(4)]
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)

    def raw_cublas():
        a = bits[0]
        for i in range(4):  # row-major C = A @ B as column-major C^T = B^T A^T
            cublas.gemmEx(handle, 0, 0, n, n, n, one.ctypes.data, bits[i + 1].data.ptr, 14, n, a.data.ptr, 14, n,
                          zero.ctypes.data, outs[i].data.ptr, 14, n, 68, -1)
            a = outs[i]

    def torch_chain():
        return t[0] @ t[1] @ t[2] @ t[3] @ t[4]
    sync = cp.cuda.Device().synchronize
    flops = 4 * 2 * n ** 3
    res = {"rlx_ms": _timed(run, sync), "rlx_full_run_ms": _timed(lambda: c.run({"x": t[0]}), sync),
           "cublas_ms": _timed(raw_cublas, sync), "torch_ms": _timed(torch_chain, sync),
           "max_rel_err_vs_torch": err}
    for k in ("rlx", "cublas", "torch"):
        res[f"{k}_tflops"] = flops / (res[f"{k}_ms"] * 1e9)
    res["rlx_vs_cublas"] = res["rlx_tflops"] / res["cublas_tflops"]
    return res


ATTENTION_SHAPES = [  # name, (b, hq, hkv, sq, sk, d), causal
    ("block_b8_h16_s512_d64_causal", (8, 16, 16, 512, 512, 64), True),
    ("decode_h16_k129_d64", (1, 16, 16, 1, 129, 64), False),
    ("decode_gqa32x8_k4096_d128", (1, 32, 8, 1, 4096, 128), True),
]


def bench_attention(torch, name, dims, causal) -> dict:
    """One attention node: each RLX kernel that applies vs torch SDPA (eager and graphed)."""
    from rlx_core import Graph
    from rlx_cuda.lower import LowerContext, attention_kernel
    b, hq, hkv, sq, sk, d = dims
    rng = np.random.default_rng(2)
    q, k, v = (torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).cuda().to(torch.bfloat16)
               for shape in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))
    g = Graph(name)
    gq, gk, gv = (g.input(n, tuple(t.shape), "bf16") for n, t in (("q", q), ("k", k), ("v", v)))
    g.set_outputs([g.attention(gq, gk, gv, "causal" if causal else "none")])
    (node,) = [n for n in g.nodes if n.kind == "attention"]
    F = torch.nn.functional
    kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)

    def sdpa():  # queries aligned to the end of the keys, as RLX defines causal
        if causal and sq > 1:
            return F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
        return F.scaled_dot_product_attention(q, kr, vr)
    sync = torch.cuda.synchronize
    ref = sdpa().float()
    res = {"torch_sdpa_ms": _timed(sdpa, sync), "torch_sdpa_graph_ms": _timed(_torch_graphed(torch, sdpa, ()), sync)}
    for mode in ("flash", "decode", "cublas"):
        if attention_kernel(LowerContext(g, attention=mode), node) != mode:
            continue
        c, run = _rlx(g, {}, {"q": q, "k": k, "v": v}, attention=mode)
        got = c.run({"q": q, "k": k, "v": v})[0].float()
        res[f"rlx_{mode}_max_abs_err_vs_torch"] = float((got - ref).abs().max())
        res[f"rlx_{mode}_ms"] = _timed(run, sync)
        res[f"rlx_{mode}_over_torch_sdpa"] = res[f"rlx_{mode}_ms"] / res["torch_sdpa_ms"]
    flops = 4 * b * hq * sq * sk * d / (2 if causal and sq > 1 else 1)
    for key in [k_ for k_ in res if k_.endswith("_ms")]:
        res[key.replace("_ms", "_tflops")] = flops / (res[key] * 1e9)
    return res


GEMV_SHAPES = [(1, 1024, 3072), (1, 1024, 4096), (1, 4096, 1024)]  # the decode step's GEMMs (m, k, n)


def bench_gemv(torch) -> dict:
    """One-row matmuls as the decode step runs them: RLX (captured graph, inputs in
    place) vs torch eager and graphed, in bursts of 50 calls."""
    from rlx_core import Graph
    rng = np.random.default_rng(3)
    res = {}
    sync = torch.cuda.synchronize
    for m, k, n in GEMV_SHAPES:
        x, w = (torch.from_numpy(rng.standard_normal(shape).astype(np.float32) / math.sqrt(k)).cuda().to(torch.bfloat16)
                for shape in ((m, k), (k, n)))
        g = Graph("gemv")
        g.set_outputs([g.matmul(g.input("x", (m, k), "bf16"), g.param("w", (k, n), "bf16"))])
        c, _ = _rlx(g, {"w": w}, {"x": x})
        c.run({"x": x})
        name = f"{m}x{k}x{n}"
        res[f"{name}_rlx_replay_ms"] = _timed(lambda: c.executable.run_device([]), sync, burst=50)
        res[f"{name}_torch_ms"] = _timed(lambda: x @ w, sync, burst=50)
        res[f"{name}_torch_graph_ms"] = _timed(_torch_graphed(torch, lambda: x @ w, ()), sync, burst=50)
        res[f"{name}_rlx_over_torch_graph"] = res[f"{name}_rlx_replay_ms"] / res[f"{name}_torch_graph_ms"]
    return res


def _weights(rng, d, layers, ff):
    def w(i, o):
        return (rng.standard_normal((i, o)) / math.sqrt(i)).astype(np.float32)
    return [{"wqkv": w(d, 3 * d), "bqkv": np.zeros(3 * d, np.float32) + 0.01, "wo": w(d, d),
             "bo": np.zeros(d, np.float32), "w1": w(d, ff), "b1": np.zeros(ff, np.float32) + 0.01, "w2": w(ff, d),
             "b2": np.zeros(d, np.float32), "g1": np.ones(d, np.float32), "g2": np.ones(d, np.float32)}
            for _ in range(layers)]


def rlx_block(g, x, p, i, heads, kv=None):
    """Pre-norm transformer block on ``x [B, S, d]``; ``kv`` = (k_cache, v_cache) to prepend."""
    b, s, d = x.dims
    dh = d // heads
    P = {k: g.param(f"l{i}.{k}", v.shape, "bf16") for k, v in p.items()}
    h = g.layer_norm(x, P["g1"])
    qkv = g.matmul(h, P["wqkv"]) + P["bqkv"]
    q, k, v = (g.transpose(g.reshape(part, (b, s, heads, dh)), (0, 2, 1, 3)) for part in g.split(qkv, [d] * 3, axis=2))
    mask = "causal"
    if kv is not None:
        k, v = g.concat([kv[0], k], axis=2), g.concat([kv[1], v], axis=2)
        mask = "none"
    a = g.reshape(g.transpose(g.attention(q, k, v, mask), (0, 2, 1, 3)), (b, s, d))
    x = x + g.matmul(a, P["wo"]) + P["bo"]
    h = g.gelu(g.matmul(g.layer_norm(x, P["g2"]), P["w1"]) + P["b1"])
    return x + g.matmul(h, P["w2"]) + P["b2"]


def torch_block(torch, x, p, heads, kv=None):
    F = torch.nn.functional
    b, s, d = x.shape
    dh = d // heads
    h = F.layer_norm(x, (d,), p["g1"])
    q, k, v = (t.view(b, s, heads, dh).transpose(1, 2) for t in (h @ p["wqkv"] + p["bqkv"]).split(d, dim=2))
    if kv is not None:
        k, v = torch.cat([kv[0], k], 2), torch.cat([kv[1], v], 2)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None).transpose(1, 2).reshape(b, s, d)
    x = x + a @ p["wo"] + p["bo"]
    h = F.gelu(F.layer_norm(x, (d,), p["g2"]) @ p["w1"] + p["b1"])
    return x + h @ p["w2"] + p["b2"]


def _torch_graphed(torch, fn, args):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return lambda: (graph.replay(), out)[1]


def build_model(torch, name, b, s, d, heads, layers, cache):
    """The RLX graph, its params and feeds (torch device arrays), and the torch model."""
    from rlx_core import Graph
    rng = np.random.default_rng(1)
    weights = _weights(rng, d, layers, 4 * d)
    tw = [{k: torch.from_numpy(v).cuda().to(torch.bfloat16) for k, v in p.items()} for p in weights]
    x = torch.from_numpy(rng.standard_normal((b, s, d)).astype(np.float32)).cuda().to(torch.bfloat16)
    dh = d // heads
    caches = [tuple(torch.from_numpy(rng.standard_normal((b, heads, cache, dh)).astype(np.float32)).cuda()
                    .to(torch.bfloat16) for _ in range(2)) for _ in range(layers)] if cache else None
    g = Graph(name)
    y = g.input("x", (b, s, d), "bf16")
    feeds = {"x": x}
    for i in range(layers):
        kv = None
        if cache:
            kv = (g.input(f"k{i}", (b, heads, cache, dh), "bf16"), g.input(f"v{i}", (b, heads, cache, dh), "bf16"))
            feeds[f"k{i}"], feeds[f"v{i}"] = caches[i]
        y = rlx_block(g, y, weights[i], i, heads, kv)
    g.set_outputs([y])
    params = {f"l{i}.{k}": v for i, p in enumerate(tw) for k, v in p.items()}

    def model(x, *flat):
        for i in range(layers):
            x = torch_block(torch, x, tw[i], heads, caches[i] if cache else None)
        return x
    return g, params, feeds, model, x


def profile_model(torch, name, *shape_args) -> None:
    """Per-step device times (each step synchronized) through RLX_TRACE, logged."""
    import logging
    from rlx_core import CompileOptions, Session
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    g, params, feeds, _, _ = build_model(torch, name, *shape_args)
    c = Session("cuda", options=CompileOptions(trace=True, backend={"outputs": "torch"})).compile(g)
    c.set_params(params)
    for _ in range(3):
        c.run(feeds)


def bench_model(cp, torch, name, b, s, d, heads, layers, cache, compile_torch) -> dict:
    import ml_dtypes
    from rlx_core import Session
    from rlx_cuda.lower import LowerContext, attention_kernel
    g, params, feeds, model, x = build_model(torch, name, b, s, d, heads, layers, cache)
    c, run = _rlx(g, params, feeds)
    with torch.no_grad():
        ref = model(x).float()
        got = c.run(feeds)[0].float()
        err = float((got - ref).abs().max() / ref.abs().max())
        sync = torch.cuda.synchronize
        host_feeds = {k: v.float().cpu().numpy().astype(ml_dtypes.bfloat16) for k, v in feeds.items()}
        host = Session("cuda").compile(g)  # numpy outputs
        host.set_params(params)
        many = {"warmup": 20, "iters": 300}  # the run-path ratios: tens of us apart, host noise evened out
        res = {"rlx_ms": _timed(run, sync), "rlx_full_run_ms": _timed(lambda: c.run(feeds), sync, **many),
               "rlx_full_run_numpy_ms": _timed(lambda: host.run(host_feeds), sync, **many),
               "input_bytes": sum(v.nbytes for v in host_feeds.values()),
               # no input copies, like torch's
               "rlx_replay_ms": _timed(lambda: c.executable.run_device([]), sync, **many),
               "torch_eager_ms": _timed(lambda: model(x), sync),
               "max_rel_err_vs_torch": err, "rlx_graph_captured": c.executable._graph is not None,
               "rlx_steps": len(c.executable.steps),
               "rlx_launches": sum(len(step.actions) for step in c.executable.steps),
               "rlx_attention_kernels": sorted({attention_kernel(LowerContext(g), n)
                                                for n in g.nodes if n.kind == "attention"}),
               "rlx_attention_fallback": c.executable.attention_fallback}
        variants = (("cublas_attention", {"attention": "cublas"}), ("no_view_folding", {"fold_views": False}))
        for variant, backend in variants:
            try:  # what the fused attention and the view folding each contribute
                cv, run_v = _rlx(g, params, feeds, **backend)
                res[f"rlx_{variant}_ms"] = _timed(run_v, sync)
                res[f"rlx_{variant}_steps"] = len(cv.executable.steps)
            except Exception as e:
                res[f"rlx_{variant}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        res["torch_cuda_graph_ms"] = _timed(_torch_graphed(torch, model, (x,)), sync)
        if compile_torch:
            try:
                compiled = torch.compile(model)
                res["torch_compile_ms"] = _timed(lambda: compiled(x), sync, warmup=3)
            except Exception as e:  # report, do not abort the other figures
                res["torch_compile_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    for k in ("torch_eager", "torch_cuda_graph", "torch_compile"):
        if f"{k}_ms" in res:
            res[f"rlx_over_{k}"] = res["rlx_ms"] / res[f"{k}_ms"]
    res["rlx_replay_over_torch_cuda_graph"] = res["rlx_replay_ms"] / res["torch_cuda_graph_ms"]
    res["full_run_torch_inputs_over_replay"] = res["rlx_full_run_ms"] / res["rlx_replay_ms"]
    res["rlx_full_run_over_torch_cuda_graph"] = res["rlx_full_run_ms"] / res["torch_cuda_graph_ms"]
    res["full_run_numpy_inputs_over_replay"] = res["rlx_full_run_numpy_ms"] / res["rlx_replay_ms"]
    return res


def summary(results: dict) -> list[str]:
    """The issue's targets as one table (what the README shows)."""
    def ratio(section, key):
        v = results.get(section, {}).get(key)
        return f"{v:.2f}x" if isinstance(v, float) else "-"
    mm = results.get("matmul_chain_bf16", {})
    rows = [
        ("4 chained 8192^2 bf16 matmuls, RLX / raw cuBLAS throughput", ratio("matmul_chain_bf16", "rlx_vs_cublas"),
         ">= 0.90x", f"{mm.get('rlx_tflops', 0):.0f} vs {mm.get('cublas_tflops', 0):.0f} TFLOP/s"),
        ("transformer block b8 s512 d1024 h16, RLX / torch eager", ratio("transformer_block_bf16", "rlx_over_torch_eager"),
         "<= 1.0x", f"torch.compile {ratio('transformer_block_bf16', 'rlx_over_torch_compile')}, torch CUDA graph "
                    f"{ratio('transformer_block_bf16', 'rlx_over_torch_cuda_graph')} (replay only "
                    f"{ratio('transformer_block_bf16', 'rlx_replay_over_torch_cuda_graph')})"),
        ("decode b1, 4 layers, d1024, RLX CUDA graph replay / torch CUDA graph",
         ratio("decode_4_layers_bf16", "rlx_replay_over_torch_cuda_graph"), "<= 1.2x",
         f"a full `run()` with its 9 torch inputs: {ratio('decode_4_layers_bf16', 'rlx_full_run_over_torch_cuda_graph')}; "
         f"vs torch eager {ratio('decode_4_layers_bf16', 'rlx_over_torch_eager')}"),
        ("decode b1, 4 layers: full `run()` / CUDA graph replay, torch CUDA inputs and outputs",
         ratio("decode_4_layers_bf16", "full_run_torch_inputs_over_replay"), "<= 1.3x",
         f"numpy inputs and outputs ({results.get('decode_4_layers_bf16', {}).get('input_bytes', 0) / 2**20:.1f} MiB "
         f"of inputs per run): {ratio('decode_4_layers_bf16', 'full_run_numpy_inputs_over_replay')}"),
    ]
    lines = ["<!-- summary -->", f"On {results.get('device', '?')} (CuPy {results.get('cupy', '?')}, "
             f"torch {results.get('torch', '?')}); ratios below 1 mean RLX is faster.", "",
             "| measurement | ratio | target | notes |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return lines + ["<!-- /summary -->", ""]


def write_results(results: dict, names: list[str], out: Path) -> str:
    """Write ``cuda_bench.json`` and ``cuda_bench.md`` (summary table, then every figure)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "cuda_bench.json").write_text(json.dumps(results, indent=2, default=str))
    lines = [f"# CUDA benchmarks on {results['device']} (CuPy {results['cupy']}, torch {results['torch']})", ""]
    lines += summary(results)
    for name in names:
        lines.append(f"## {name}")
        lines += [f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}" for k, v in results[name].items()
                  if k != "trace"]
        lines.append("")
    text = "\n".join(lines)
    (out / "cuda_bench.md").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--profile", action="store_true", help="log per-step device times of the block and the "
                    "decode graph instead of benchmarking")
    args = ap.parse_args(argv)
    import cupy as cp
    import torch
    if args.profile:
        profile_model(torch, "block", 8, 512, 1024, 16, 1, 0)
        profile_model(torch, "decode", 1, 1, 1024, 16, 4, 128)
        return 0
    results = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cupy": cp.__version__,
               "torch": torch.__version__}
    sections = [(f"attention_{name}", lambda n=name, dims=dims, causal=causal: bench_attention(torch, n, dims, causal))
                for name, dims, causal in ATTENTION_SHAPES]
    sections += [("transformer_block_bf16", lambda: bench_model(cp, torch, "block", 2 if args.quick else 8, 512, 1024,
                                                                16, 1, 0, not args.no_compile)),
                 ("decode_4_layers_bf16", lambda: bench_model(cp, torch, "decode", 1, 1, 1024, 16, 4, 128,
                                                              not args.no_compile)),
                 ("gemv_bf16", lambda: bench_gemv(torch)),
                 ("matmul_chain_bf16", lambda: bench_matmul_chain(cp, torch, 2048 if args.quick else 8192))]
    for name, fn in sections:
        t0 = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as e:
            import traceback
            results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-1500:]}
        results[name]["bench_seconds"] = round(time.perf_counter() - t0, 1)
        print(f"[bench] {name}: {json.dumps(results[name], default=str)[:600]}", flush=True)
    text = write_results(results, [name for name, _ in sections], Path(args.out))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

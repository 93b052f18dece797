"""rlx-cpu against onnxruntime on ONNX models as users bring them: exported from torch.

    python benchmarks/onnx_cpu_bench.py                   # ~5 minutes: results/onnx_cpu.{json,md}, README table
    python benchmarks/onnx_cpu_bench.py --models mlp,ifloop --rounds 10 --no-readme   # a quick look
    python benchmarks/onnx_cpu_bench.py --busy-cores 1    # another process holds a core: results/onnx_cpu_loaded.*
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/onnx_cpu_bench.py --results onnx_cpu_native
                          # numpy's OpenBLAS on the kernels it picks itself, where the host pins older ones

Models (exported with ``torch.onnx.export``, opset 17, eval mode, random weights; the
last built with ``onnx.helper``): an MLP 784-512-512-10 at batch 64; a CNN with
BatchNorm (three 3x3 convs, 1x3x64x64); ``nn.TransformerEncoderLayer`` (d_model 256, 4
heads, ffn 1024, seq 128); a GPT-2 style block (pre-norm, causal mask by
``masked_fill``, tanh GELU; d 256, seq 128); a GRU (64 -> 128, 32 steps); and a small
If/Loop model (an 8-trip Loop of ``tanh(x @ W + b)`` on 1x16, then an If on its sum).

Latency: rlx-cpu (``load_onnx`` + ``Session("cpu")``, measuring its choices afresh in
an empty kernel cache) and onnxruntime (2 intra-op threads, its default graph
optimizations) run in this one process, each model's outputs checked against
onnxruntime's first. Each round times one burst of each runtime (about ``BURST_S`` of
back-to-back runs) in a shuffled order, after a pause (``SETTLE_S``) that lets the
other runtime's idle threads stop spinning and ``PRIME_S`` of untimed runs of its own
(steady state: its pools awake, as in a loop of runs; ``common.interleaved_times``); a runtime's
latency is the median over rounds of its bursts' mean, the ratio the median over rounds
of rlx-cpu's / onnxruntime's (``common.paired_ratio``). Compile times come from fresh
interpreters (``--worker``): *cold* against an empty kernel cache, *warm* the median of
three later processes on the same cache, also while another process keeps one core
busy; both exclude what a process does once (imports, plugin discovery, numba's
start-up: ``start``) and the ONNX import, which are reported beside them. ``alloc`` is
tracemalloc's peak per steady-state ``run(x, out=...)``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from common import (ROOT, allocated_per_call, in_subprocess, interleaved_times, machine, markdown_table,
                    paired_ratio, progress, use_checkout, worker_main, write_results)

SCRIPT = Path(__file__).resolve()
MODELS = ("mlp", "cnn_bn", "encoder", "gpt2_block", "gru", "ifloop")
LABELS = {"mlp": "MLP 784-512-512-10, batch 64", "cnn_bn": "CNN + BatchNorm, 1x3x64x64",
          "encoder": "TransformerEncoderLayer d256 h4 s128", "gpt2_block": "GPT-2 block d256 h4 s128",
          "gru": "GRU 64->128, 32 steps", "ifloop": "If/Loop (onnx.helper), 1x16"}
TARGETS = {name: 1.0 for name in MODELS} | {"ifloop": 2.0}  # x onnxruntime
COMPILE_TARGETS_MS = {"cold": 2000.0, "warm": 100.0}
ALLOC_TARGET_BYTES = 4096
THREADS = 2
OPSET = 17
BURST_S = 0.01
SETTLE_S = 0.2  # onnxruntime's pool spins about 40 ms after a run, OpenBLAS's threads about 100 ms
PRIME_S = 0.06  # untimed runs before each burst: the runtime's own pools awake, as in a loop of runs


# --- the models ------------------------------------------------------------------------------
def _torch_modules() -> dict:
    """name -> (module, example input) for the exported models."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    def conv_bn(c_in, c_out):
        return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]

    class Gpt2Block(nn.Module):
        def __init__(self, d=256, heads=4, seq=128):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
            att = att.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class OneInput(nn.Module):
        """``inner(x)`` (its first output where it returns several, as a GRU does): the
        exporter then traces exactly one input (the encoder layer's optional arguments
        would otherwise be traced as tensors)."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            out = self.inner(x)
            return out[0] if isinstance(out, tuple) else out

    cnn = nn.Sequential(*conv_bn(3, 16), *conv_bn(16, 32), nn.MaxPool2d(2), *conv_bn(32, 32),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    for m in cnn.modules():  # running statistics that are not the identity
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return {
        "mlp": (nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)),
                torch.randn(64, 784)),
        "cnn_bn": (cnn, torch.randn(1, 3, 64, 64)),
        "encoder": (OneInput(nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)),
                    torch.randn(1, 128, 256)),
        "gpt2_block": (Gpt2Block(), torch.randn(1, 128, 256)),
        "gru": (OneInput(nn.GRU(64, 128, batch_first=True)), torch.randn(1, 32, 64)),
    }


def _if_loop_model():
    """An 8-trip Loop of ``x = tanh(x @ W + b)`` on [1, 16], then ``If(sum(x) > 0)``:
    ``x * 2`` else ``x - 2``, as onnx.helper builds it."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    d = 16
    value = h.make_tensor_value_info
    body = h.make_graph(
        [h.make_node("MatMul", ["x_in", "W"], ["xw"]), h.make_node("Add", ["xw", "B"], ["xb"]),
         h.make_node("Tanh", ["xb"], ["x_out"]), h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [value("i", T.INT64, []), value("cond_in", T.BOOL, []), value("x_in", T.FLOAT, [1, d])],
        [value("cond_out", T.BOOL, []), value("x_out", T.FLOAT, [1, d])])
    then = h.make_graph([h.make_node("Mul", ["y", "two"], ["t"])], "then", [], [value("t", T.FLOAT, [1, d])])
    other = h.make_graph([h.make_node("Sub", ["y", "two"], ["e"])], "else", [], [value("e", T.FLOAT, [1, d])])
    inits = [nh.from_array((rng.standard_normal((d, d)) / 4).astype(np.float32), "W"),
             nh.from_array(rng.standard_normal(d).astype(np.float32), "B"),
             nh.from_array(np.array(8, np.int64), "M"), nh.from_array(np.array(2, np.float32), "two"),
             nh.from_array(np.array(0, np.float32), "zero")]
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "x"], ["y"], body=body),
         h.make_node("ReduceSum", ["y"], ["s"], keepdims=0), h.make_node("Greater", ["s", "zero"], ["c"]),
         h.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)],
        "ifloop", [value("x", T.FLOAT, [1, d])], [value("out", T.FLOAT, [1, d])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)])


def export_models(names: list[str], folder: Path) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """name -> (ONNX file in ``folder``, example inputs by ONNX name)."""
    import onnx
    import torch
    modules = _torch_modules()
    out = {}
    for name in names:
        path = folder / f"{name}.onnx"
        if name == "ifloop":
            onnx.save(_if_loop_model(), path)
            feeds = {"x": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)}
        else:
            module, x = modules[name]
            torch.backends.mha.set_fastpath_enabled(False)  # the encoder layer as ONNX ops, not one fused aten op
            torch.onnx.export(module.eval(), (x,), str(path), dynamo=False, opset_version=OPSET,
                              input_names=["x"], output_names=["y"])
            feeds = {"x": x.numpy()}
        out[name] = (path, feeds)
    return out


# --- the runtimes ----------------------------------------------------------------------------
def rlx_runner(path: Path):
    """(run(feeds) -> outputs, the CompiledGraph) for rlx-cpu."""
    from rlx_core import Session
    from rlx_core.frontends.onnx import load_onnx
    model = load_onnx(path)
    compiled = Session("cpu").compile(model.graph)
    compiled.set_params(model.params)
    return compiled.run, compiled


def ort_runner(path: Path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def _burst(run, feeds, seconds: float):
    """A contender running ``run(feeds)`` back to back about ``seconds`` long, and its run count."""
    t0 = time.perf_counter()
    run(feeds)
    count = max(1, round(seconds / max(time.perf_counter() - t0, 1e-7)))

    def burst():
        for _ in range(count):
            run(feeds)
    return burst, count


def allocated_per_run(compiled, feeds) -> int:
    """tracemalloc's peak bytes during one steady-state ``run(feeds, out=...)``."""
    out = [np.empty(s.dims, s.dtype.np) for s in compiled.output_shapes]
    return allocated_per_call(lambda: compiled.run(feeds, out=out))


def measure_latency(models: dict, rounds: int) -> dict:
    results = {}
    for name, (path, feeds) in models.items():
        progress(f"{name}: compiling and checking ...")
        rlx, compiled = rlx_runner(path)
        ort = ort_runner(path)
        for got, want in zip(rlx(feeds), ort(feeds)):
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4, err_msg=f"rlx-cpu on {name}")
        bursts = {"rlx-cpu": _burst(rlx, feeds, BURST_S), "onnxruntime": _burst(ort, feeds, BURST_S)}
        progress(f"{name}: {rounds} rounds ...")
        primes = {"rlx-cpu": _burst(rlx, feeds, PRIME_S)[0], "onnxruntime": _burst(ort, feeds, PRIME_S)[0]}
        times = interleaved_times({k: b for k, (b, _) in bursts.items()}, rounds, warmup=2, settle_s=SETTLE_S,
                                  prime=primes)
        per_run = {k: [t / bursts[k][1] for t in ts] for k, ts in times.items()}
        results[name] = {"latency_us": {k: statistics.median(v) * 1e6 for k, v in per_run.items()},
                         "ratio": paired_ratio(per_run["rlx-cpu"], per_run["onnxruntime"]),
                         "alloc_bytes": allocated_per_run(compiled, feeds),
                         "steps": len(compiled.executable.steps)}
    return results


# --- compile times (fresh interpreters) ---------------------------------------------------------
def compile_worker(path: str) -> dict:
    """One process importing and compiling the model at ``path`` (cache: XDG_CACHE_HOME)."""
    t0 = time.perf_counter()
    use_checkout()
    from rlx_core import Session
    from rlx_core.frontends.onnx import load_onnx
    import rlx_cpu.executable  # noqa: F401  (the backend's modules)
    import rlx_cpu.jit
    session = Session("cpu")  # finds the plugins
    rlx_cpu.jit.warm_up()  # numba's start-up
    t_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = load_onnx(path)
    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    session.compile(model.graph)
    return {"compile_ms": (time.perf_counter() - t0) * 1e3, "import_ms": t_import * 1e3,
            "start_ms": t_start * 1e3}


def measure_compiles(models: dict, repeats: int = 3) -> dict:
    """Per model: a cold compile, then the medians of ``repeats`` warm ones (each in a
    fresh process), without and with a busy core."""
    from cpu_bench import busy_cores

    def median_run(runs: list[dict]) -> dict:
        return sorted(runs, key=lambda r: r["compile_ms"])[len(runs) // 2]
    results = {}
    for name, (path, _) in models.items():
        progress(f"{name}: compile times (cold, warm, warm with a busy core) ...")
        with tempfile.TemporaryDirectory(prefix="rlx-bench-cache-") as cache:
            env = {"XDG_CACHE_HOME": cache}
            cold = in_subprocess(SCRIPT, "compile", str(path), env=env)
            warm = median_run([in_subprocess(SCRIPT, "compile", str(path), env=env) for _ in range(repeats)])
            with busy_cores(1):
                busy = median_run([in_subprocess(SCRIPT, "compile", str(path), env=env) for _ in range(repeats)])
        results[name] = {"cold": cold, "warm": warm, "warm_busy": busy}
    return results


# --- report -----------------------------------------------------------------------------------
def render(results: dict, loaded: bool) -> str:
    lat, comp = results["latency"], results.get("compile", {})
    rows = []
    for name, r in lat.items():
        verdict = "met" if r["ratio"] <= TARGETS[name] else "missed"
        row = [LABELS[name], f"{r['latency_us']['rlx-cpu']:,.1f}", f"{r['latency_us']['onnxruntime']:,.1f}",
               f"{r['ratio']:.2f}x", f"<= {TARGETS[name]:g}x: {verdict}"]
        if name in comp:
            c = comp[name]
            row += [f"{c['cold']['compile_ms']:,.0f}", f"{c['warm']['compile_ms']:,.1f}",
                    f"{c['warm_busy']['compile_ms']:,.1f}", f"{c['warm']['import_ms']:,.0f}"]
        rows.append(row + [f"{r['alloc_bytes']:,}"])
    headers = ["model", "rlx-cpu us", "onnxruntime us", "ratio", "target"]
    if comp:
        headers += ["cold compile ms", "warm ms", "warm, 1 core busy ms", "ONNX import ms"]
    text = markdown_table(headers + ["alloc B/run"], rows)
    m = results["machine"]
    text += (f"\nLoad average before / after: {results['load_average_before']} / {m.get('load_average_1_5_15min')}"
             f" ({m.get('cpus')} cores{', one more kept busy' if loaded else ''}); targets: ratio as listed, "
             f"cold compile <= {COMPILE_TARGETS_MS['cold']:,.0f} ms, warm <= {COMPILE_TARGETS_MS['warm']:,.0f} ms, "
             f"alloc < {ALLOC_TARGET_BYTES:,} B.\n")
    cores = sorted({str(b.get("architecture")) for b in m.get("blas", []) if b.get("internal_api") == "openblas"})
    forced = ", ".join(f"{k}={v}" for k, v in m.get("openblas_env", {}).items())
    text += (f"numpy's OpenBLAS ran its {'/'.join(cores) or 'unknown'} kernels"
             + (f" ({forced} set in the environment)" if forced else " (its own choice for this CPU)")
             + "; onnxruntime's MLAS picks its kernels by itself.\n")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--no-compile", action="store_true", help="skip the compile times")
    parser.add_argument("--no-readme", action="store_true", help="do not update the README table")
    parser.add_argument("--results", default="onnx_cpu",
                        help="results name: results/<name>.{json,md} and the README block of that name")
    parser.add_argument("--busy-cores", type=int, default=0,
                        help="other processes spinning during the latency rounds (results/onnx_cpu_loaded.*)")
    args = parser.parse_args()
    use_checkout()
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    load_before = [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None
    from cpu_bench import busy_cores
    with tempfile.TemporaryDirectory(prefix="rlx-onnx-bench-") as folder:
        progress("exporting the models ...")
        models = export_models(names, Path(folder))
        os.environ["XDG_CACHE_HOME"] = str(Path(folder) / "cache")  # rlx-cpu measures its choices afresh
        with busy_cores(args.busy_cores):
            results = {"latency": measure_latency(models, args.rounds)}
        if not args.no_compile and not args.busy_cores:
            results["compile"] = measure_compiles(models)
    results.update(machine=machine(), load_average_before=load_before, rounds=args.rounds, threads=THREADS,
                   busy_cores=args.busy_cores, burst_s=BURST_S, settle_s=SETTLE_S)
    markdown = render(results, bool(args.busy_cores))
    json_path, md_path = write_results(f"{args.results}_loaded" if args.busy_cores else args.results, results, markdown)
    print(markdown)
    progress(f"wrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}")
    if not args.no_readme and not args.busy_cores and set(names) == set(MODELS):
        import update_readme
        update_readme.main()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::UserWarning")
    if not worker_main({"compile": compile_worker}):
        main()

"""rlx-mlx against the same models written directly in MLX: a transformer block and a matmul chain.

    python benchmarks/mlx_block.py                                   # here: MLX's Linux CPU build
    python benchmarks/mlx_block.py --batch 8 --seq 512 --d-model 1024 --dtype bf16 --chain-n 8192   # a GPU

The block is the one of ``benchmarks/tpu_block.py`` (pre-norm encoder block: ``h = x +
attn(LN1(x)) W_o + b_o``, ``y = h + gelu(LN2(h) W_1 + b_1) W_2 + b_2``, heads of 64
features, ffn 4 x d_model), built by the same function. Three models compute it from
the same weights:

* ``rlx``: the RLX graph compiled by the mlx backend (one ``mx.compile`` function);
* ``mlx``: the block written directly in MLX under ``mx.compile`` with the numbers RLX
  defines -- 16-bit values computed in f32 and rounded once per op, 16-bit matmuls
  accumulating in f32 -- using ``mx.fast.layer_norm`` and
  ``mx.fast.scaled_dot_product_attention`` as an MLX user would;
* ``mlx_idiomatic``: the block as MLX code usually writes it (everything in the block's
  dtype, ``mx.fast`` kernels on 16-bit values, ``nn.gelu``): other numbers, shown to
  tell what RLX's definitions cost.

The matmul chain is ``--chain`` products ``y = y @ w_i`` of [n, n] matrices in
``--chain-dtype`` (default bf16), RLX's graph against the same chain in raw MLX under
``mx.compile``; the figure is throughput (TFLOP/s) and the ratio RLX / MLX.

Timings alternate between the contenders: ``--repeats`` rounds after a warm-up, each
calling every contender once in a shuffled order; each call is waited for
(``mx.eval``). "device" timings pass MLX arrays in and get MLX arrays out (RLX's
``outputs="mlx"``, its executable called directly: ``CompiledGraph.run`` checks numpy
dtypes and does not know MLX's); "host" timings pass a numpy input and read a numpy
output. The RLX path's ratio is the median over rounds of ``rlx / mlx``. Targets (from
the issue, for a GPU): block <= 1.10x, matmul chain throughput >= 0.90x.

Results go to ``benchmarks/results/mlx_<device>.json`` (``cpu``, ``metal``, ``cuda``,
``h200``) unless ``--output`` says otherwise, and ``benchmarks/results/mlx_block.md``
gets one row per results file.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform as host_platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path += [str(ROOT), str(ROOT / "plugins" / "rlx-mlx")]  # where rlx_core / rlx_mlx are not installed
sys.path.append(str(Path(__file__).resolve().parent))  # common.py, also when loaded by path

from common import interleaved_times, paired_ratio, write_results  # noqa: E402

TARGET_BLOCK = 1.10
TARGET_CHAIN = 0.90


def _tpu_block():
    """``benchmarks/tpu_block.py``: the block's config, weights, input and RLX graph."""
    spec = importlib.util.spec_from_file_location("tpu_block", Path(__file__).with_name("tpu_block.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BLOCK = _tpu_block()
block_config, block_weights, block_input, rlx_block = (_BLOCK.block_config, _BLOCK.block_weights,
                                                       _BLOCK.block_input, _BLOCK.rlx_block)


# --- the block written in MLX ------------------------------------------------------------
def mlx_block(cfg: dict, idiomatic: bool = False):
    """The block written directly in MLX: ``fn(weights, x) -> y`` on MLX arrays."""
    import mlx.core as mx
    b, s, d, h = cfg["batch"], cfg["seq"], cfg["d_model"], cfg["heads"]
    scale = 1 / math.sqrt(d // h)
    f32 = mx.float32

    def heads(t):
        return t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

    if idiomatic:
        def add(a, c):
            return a + c

        def layer_norm(x, g, beta):
            return mx.fast.layer_norm(x, g, beta, 1e-5)

        def attention(q, k, v):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)

        def gelu(t):
            return 0.5 * t * (1 + mx.erf(t / math.sqrt(2)))
    else:  # RLX's numbers: 16-bit values computed in f32, rounded once per op
        def add(a, c):
            return (a.astype(f32) + c.astype(f32)).astype(a.dtype)

        def layer_norm(x, g, beta):
            return mx.fast.layer_norm(x.astype(f32), g.astype(f32), beta.astype(f32), 1e-5).astype(x.dtype)

        def attention(q, k, v):
            out = mx.fast.scaled_dot_product_attention(q.astype(f32), k.astype(f32), v.astype(f32), scale=scale)
            return out.astype(q.dtype)

        def gelu(t):
            w = t.astype(f32)
            return (0.5 * w * (1 + mx.erf(w * (1 / math.sqrt(2))))).astype(t.dtype)

    def block(w, x):
        qkv = add(layer_norm(x, w["ln1_g"], w["ln1_b"]) @ w["w_qkv"], w["b_qkv"])
        q, k, v = (heads(t) for t in mx.split(qkv, 3, axis=-1))
        attn = attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, d)
        hidden = add(x, add(attn @ w["w_o"], w["b_o"]))
        up = gelu(add(layer_norm(hidden, w["ln2_g"], w["ln2_b"]) @ w["w_1"], w["b_1"]))
        return add(hidden, add(up @ w["w_2"], w["b_2"]))
    return block


# --- the matmul chain ----------------------------------------------------------------------
def chain_graph(n: int, length: int, dtype: str):
    from rlx_core import Graph
    g = Graph("matmul_chain")
    y = g.input("x", (n, n), dtype)
    for i in range(length):
        y = g.matmul(y, g.param(f"w{i}", (n, n), dtype))
    g.set_outputs([y], names=["y"])
    return g


def chain_weights(n: int, length: int, dtype: str, seed: int = 2) -> dict[str, np.ndarray]:
    from rlx_core import DType
    rng = np.random.default_rng(seed)
    return {f"w{i}": (rng.standard_normal((n, n)) / math.sqrt(n)).astype(DType.of(dtype).np) for i in range(length)}


def mlx_chain(length: int):
    def chain(w, x):
        for i in range(length):
            x = x @ w[f"w{i}"]
        return x
    return chain


# --- measuring ------------------------------------------------------------------------------
def _register():
    import rlx_core
    from rlx_core.runtime import registry
    if not registry().entries.get("mlx"):
        import rlx_mlx.plugin
        rlx_core.register_backends(rlx_mlx.plugin)


def compile_rlx(graph, outputs: str, weights: dict):
    """``graph`` compiled on the mlx backend with ``weights`` as its params; (compiled, seconds)."""
    from rlx_core import CompileOptions, Session
    _register()
    t0 = time.perf_counter()
    compiled = Session("mlx").compile(graph, CompileOptions(backend={"outputs": outputs}))
    seconds = time.perf_counter() - t0
    compiled.set_params(weights)
    return compiled, seconds


def _to_mlx(weights: dict) -> dict:
    import mlx.core as mx
    out = {k: mx.array(v) for k, v in weights.items()}
    mx.eval(out)
    return out


def run_block(cfg: dict, repeats: int) -> dict:
    import mlx.core as mx
    x_host = block_input(cfg)
    weights_host = block_weights(cfg)
    weights = _to_mlx(weights_host)
    x_dev = mx.array(x_host)
    mx.eval(x_dev)
    graph = rlx_block(cfg)
    rlx_dev, rlx_compile_s = compile_rlx(graph, "mlx", weights_host)
    rlx_host, _ = compile_rlx(graph, "numpy", weights_host)
    run_dev = rlx_dev.executable.run  # MLX arrays in and out (see the module docstring)
    direct = mx.compile(mlx_block(cfg))
    idiomatic = mx.compile(mlx_block(cfg, idiomatic=True))
    t0 = time.perf_counter()
    mx.eval(direct(weights, x_dev))  # MLX compiles on the first call
    mlx_compile_s = time.perf_counter() - t0

    device = {
        "rlx_device": lambda: mx.eval(run_dev({"x": x_dev})),
        "mlx_device": lambda: mx.eval(direct(weights, x_dev)),
        "mlx_idiomatic_device": lambda: mx.eval(idiomatic(weights, x_dev)),
    }
    host = {
        "rlx_host": lambda: rlx_host.run({"x": x_host})[0],
        "mlx_host": lambda: _numpy(direct(weights, mx.array(x_host))),
    }
    times = interleaved_times(device, repeats, warmup=2)
    times.update(interleaved_times(host, repeats, warmup=2))
    y_rlx = np.asarray(rlx_host.run({"x": x_host})[0], np.float64)
    y_mlx = np.asarray(_numpy(direct(weights, x_dev)), np.float64)
    return {
        "config": cfg, "repeats": repeats,
        "median_ms": {name: 1e3 * statistics.median(ts) for name, ts in times.items()},
        "ratio_device": paired_ratio(times["rlx_device"], times["mlx_device"]),
        "ratio_host": paired_ratio(times["rlx_host"], times["mlx_host"]),
        "compile_s": {"rlx": rlx_compile_s, "mlx": mlx_compile_s},
        "max_abs_diff_rlx_vs_mlx": float(np.max(np.abs(y_rlx - y_mlx))),
        "output_scale": float(np.max(np.abs(y_mlx))), "target": TARGET_BLOCK,
    }


def run_chain(n: int, length: int, dtype: str, repeats: int) -> dict:
    import mlx.core as mx
    from rlx_core import DType
    weights_host = chain_weights(n, length, dtype)
    weights = _to_mlx(weights_host)
    x_host = np.random.default_rng(3).standard_normal((n, n)).astype(DType.of(dtype).np)
    x_dev = mx.array(x_host)
    mx.eval(x_dev)
    rlx, _ = compile_rlx(chain_graph(n, length, dtype), "mlx", weights_host)
    run = rlx.executable.run
    raw = mx.compile(mlx_chain(length))
    times = interleaved_times({"rlx": lambda: mx.eval(run({"x": x_dev})),
                                "mlx": lambda: mx.eval(raw(weights, x_dev))}, repeats, warmup=2)
    flops = 2 * n ** 3 * length
    tflops = {name: flops / statistics.median(ts) / 1e12 for name, ts in times.items()}
    return {"n": n, "length": length, "dtype": dtype, "repeats": repeats, "tflops": tflops,
            "ratio_throughput": 1 / paired_ratio(times["rlx"], times["mlx"]), "target": TARGET_CHAIN,
            "median_ms": {name: 1e3 * statistics.median(ts) for name, ts in times.items()}}


def _numpy(y):
    """An MLX result as numpy (bf16 through its bits: PEP 3118 has no bfloat16)."""
    import mlx.core as mx
    from rlx_core import DType
    if y.dtype == mx.bfloat16:
        return np.asarray(y.view(mx.uint16)).view(DType.BF16.np)
    return np.asarray(y)


def describe_device() -> dict:
    import mlx.core as mx
    from rlx_mlx.platform import availability, build_name, requested_device
    found = availability(requested_device())
    detail = dict(found.detail)
    kind = detail.get("device", "cpu")
    name = detail.get("device_name") or ""
    label = "h200" if "H200" in name.upper() else (detail.get("gpu") or "cpu").lower()
    return {"label": label, "device": kind, "gpu": detail.get("gpu"), "device_name": name, "build": build_name(),
            "mlx": mx.__version__, "reason": found.reason}


def run_benchmark(cfg: dict, repeats: int, chain_n: int, chain_length: int, chain_dtype: str,
                  chain_repeats: int) -> dict:
    return {
        "device": describe_device(), "python": host_platform.python_version(), "host": host_platform.machine(),
        "cpus": os.cpu_count(), "load_average": os.getloadavg(),
        "block": run_block(cfg, repeats),
        "chain": run_chain(chain_n, chain_length, chain_dtype, chain_repeats),
    }


def report(result: dict) -> str:
    dev, blk, chain = result["device"], result["block"], result["chain"]
    ms = blk["median_ms"]
    lines = [f"{dev['build']} on {dev['reason'].split(' on ', 1)[-1]}",
             f"transformer block {blk['config']}, median of {blk['repeats']}:",
             f"  {'path':<8} {'rlx ms':>9} {'mlx ms':>9} {'rlx/mlx':>8}"]
    for path in ("device", "host"):
        ratio = blk[f"ratio_{path}"]
        lines.append(f"  {path:<8} {ms[f'rlx_{path}']:>9.3f} {ms[f'mlx_{path}']:>9.3f} {ratio:>7.2f}x")
    lines.append(f"  idiomatic MLX (other numerics), device: {ms['mlx_idiomatic_device']:.3f} ms")
    lines.append(f"  compile: rlx {blk['compile_s']['rlx']:.2f} s, mlx {blk['compile_s']['mlx']:.2f} s (first call); "
                 f"max |rlx - mlx| = {blk['max_abs_diff_rlx_vs_mlx']:.3g} (outputs up to {blk['output_scale']:.3g})")
    lines.append(f"matmul chain {chain['length']} x {chain['n']}^2 {chain['dtype']}: rlx {chain['tflops']['rlx']:.4g} "
                 f"TFLOP/s, mlx {chain['tflops']['mlx']:.4g} TFLOP/s, throughput ratio {chain['ratio_throughput']:.2f}x")
    return "\n".join(lines)


def default_output(result: dict) -> Path:
    return ROOT / "benchmarks" / "results" / f"mlx_{result['device']['label']}.json"


def write_markdown(results_dir: Path) -> Path:
    """``mlx_block.md``: one row per device's latest ``mlx_*.json``."""
    rows = []
    for path in sorted(results_dir.glob("mlx_*.json")):
        r = json.loads(path.read_text())
        d, blk, chain = r["device"], r["block"], r["chain"]
        c, ms = blk["config"], blk["median_ms"]
        rows.append(f"| {d['build']}, {d['device']}{' (' + d['device_name'] + ')' if d['device_name'] else ''} | "
                    f"b{c['batch']} s{c['seq']} d{c['d_model']} {c['dtype']} | {ms['rlx_device']:.3f} | "
                    f"{ms['mlx_device']:.3f} | {blk['ratio_device']:.2f}x | {blk['ratio_host']:.2f}x | "
                    f"{ms['mlx_idiomatic_device']:.3f} | {chain['length']} x {chain['n']}^2 {chain['dtype']}: "
                    f"{chain['tflops']['rlx']:.3g} / {chain['tflops']['mlx']:.3g} TFLOP/s = "
                    f"{chain['ratio_throughput']:.2f}x |")
    out = results_dir / "mlx_block.md"
    out.write_text(
        "| MLX build, device | block | rlx-mlx ms | MLX mx.compile ms | rlx/mlx (MLX arrays) | rlx/mlx (numpy) | "
        "idiomatic MLX ms | matmul chain rlx / mlx |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
        f"\nTargets on a GPU: block <= {TARGET_BLOCK:.2f}x, matmul chain throughput >= {TARGET_CHAIN:.2f}x.\n")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=None, help="default: d_model / 64")
    parser.add_argument("--ffn", type=int, default=None, help="default: 4 x d_model")
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--chain-n", type=int, default=None, help="default: 8192 on a GPU, 512 on the CPU")
    parser.add_argument("--chain", type=int, default=4, help="matmuls in the chain")
    parser.add_argument("--chain-dtype", default="bf16", choices=["f32", "bf16", "f16"])
    parser.add_argument("--chain-repeats", type=int, default=None, help="default: 20 on a GPU, 5 on the CPU")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        import mlx.core  # noqa: F401
        import rlx_core  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"cannot import rlx_core / mlx ({e}): pip install -e . -e plugins/rlx-mlx") from None
    gpu = describe_device()["device"] == "gpu"
    cfg = block_config(args.batch, args.seq, args.d_model, args.heads, args.ffn, args.dtype)
    chain_n = args.chain_n or (8192 if gpu else 512)
    chain_repeats = args.chain_repeats or (20 if gpu else 5)
    result = run_benchmark(cfg, args.repeats, chain_n, args.chain, args.chain_dtype, chain_repeats)
    print(report(result))
    out = args.output or default_output(result)
    write_results(out, result)
    print(f"wrote {out}")
    print(f"wrote {write_markdown(out.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

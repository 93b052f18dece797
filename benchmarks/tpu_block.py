"""rlx-tpu against hand-written JAX on one transformer encoder block.

    python benchmarks/tpu_block.py                       # XLA:CPU, the CPU issue's block
    RLX_TPU_PLATFORM=gpu python benchmarks/tpu_block.py --batch 8 --seq 512 --d-model 1024 --dtype bf16

The block (pre-norm): ``h = x + attn(LN1(x)) W_o + b_o``, ``y = h + gelu(LN2(h) W_1 + b_1) W_2 + b_2``,
multi-head attention without a mask, heads of 64 features by default, ffn 4 x d_model.
Defaults are the CPU issue's block (d_model 256, 4 heads, seq 128, ffn 1024, batch 1, f32).

Two models compute it from the same weights:

* ``rlx``: the block built with the RLX builder API, compiled by the tpu backend;
* ``jax``: the same block written directly in JAX and ``jax.jit``-ed, with the numbers
  RLX defines: 16-bit values computed in f32 and rounded once per op (residual and bias
  adds included), matmuls on 16-bit operands accumulating in f32, f32 matmuls at full
  precision (no TF32 / bf16 passes).

A third, ``jax_idiomatic``, is the block as JAX code usually writes it (XLA's default
matmul precision, 16-bit arithmetic left to XLA -- which may keep f32 between fused
ops -- and softmax weights rounded to the block's dtype before the value product): not
the same numbers, shown to tell what RLX's definitions cost.

Timings alternate between the models: ``--repeats`` rounds after a warm-up, each
calling every model once in a shuffled order. "device" timings keep inputs and outputs
on the device (RLX's ``outputs="jax"``); "host" timings, a phase of their own, pass a
numpy input and read back a numpy output (interleaved with them, RLX's device-array
calls on XLA:GPU took 10-16% longer than jax.jit's; RLX runs both paths on one XLA
program where ``jax.jit`` keeps one executable per kind of argument, and separate
programs halved that gap in one trial -- the cause is not pinned down). Both wait
for each call's result, so the host's time to launch the program (a Python call into
PJRT) adds to the device's. "pipelined" timings queue
``PIPELINE_DEPTH`` device-array calls back to back and wait for the last: the time per
call once launches overlap the device's work, as in a serving or training loop. The RLX
path's overhead is the median over rounds of ``rlx / jax``, minus 1; the target is <= 10%.

Where a numpy call's time goes (issue 18's run-path split): ``rlx_launch`` is the XLA
program alone (``TpuExecutable.launch`` on a device array, waited), the device's work
plus PJRT's launch; the report gives the full ``run`` with numpy in and out against it,
and what jax.jit pays for the same transfers: ``jax_numpy_in`` (numpy input, device
output) and ``jax_numpy_out`` (device input, numpy output) against ``jax_device``. Those
come from medians of different phases (not paired): read them as estimates.
Results go to ``benchmarks/results/tpu_<platform>.json`` (``tpu_h200.json`` on an H200) unless
``--output`` says otherwise.
"""
from __future__ import annotations

import argparse
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
sys.path += [str(ROOT), str(ROOT / "plugins" / "rlx-tpu")]  # where rlx_core / rlx_tpu are not installed
sys.path.append(str(Path(__file__).resolve().parent))  # common.py, also when loaded by path

from common import interleaved_times, paired_ratio, write_results  # noqa: E402

TARGET_OVERHEAD = 0.10
PIPELINE_DEPTH = 20  # calls per pipelined sample


# --- the model ------------------------------------------------------------------------
def block_config(batch=1, seq=128, d_model=256, heads=None, ffn=None, dtype="f32") -> dict:
    heads = heads or max(d_model // 64, 1)
    if d_model % heads:
        raise SystemExit(f"d_model {d_model} is not a multiple of heads {heads}")
    return {"batch": batch, "seq": seq, "d_model": d_model, "heads": heads, "ffn": ffn or 4 * d_model,
            "dtype": dtype}


def block_weights(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights scaled like a trained block's (unit-variance activations), in the block's dtype."""
    from rlx_core import DType
    rng = np.random.default_rng(seed)
    d, f = cfg["d_model"], cfg["ffn"]

    def dense(rows, cols):
        return rng.standard_normal((rows, cols)) / math.sqrt(rows)
    weights = {"ln1_g": 1 + 0.1 * rng.standard_normal(d), "ln1_b": 0.1 * rng.standard_normal(d),
               "w_qkv": dense(d, 3 * d), "b_qkv": 0.1 * rng.standard_normal(3 * d),
               "w_o": dense(d, d), "b_o": 0.1 * rng.standard_normal(d),
               "ln2_g": 1 + 0.1 * rng.standard_normal(d), "ln2_b": 0.1 * rng.standard_normal(d),
               "w_1": dense(d, f), "b_1": 0.1 * rng.standard_normal(f),
               "w_2": dense(f, d), "b_2": 0.1 * rng.standard_normal(d)}
    np_dtype = DType.of(cfg["dtype"]).np
    return {name: w.astype(np_dtype) for name, w in weights.items()}


def block_input(cfg: dict, seed: int = 1) -> np.ndarray:
    from rlx_core import DType
    x = np.random.default_rng(seed).standard_normal((cfg["batch"], cfg["seq"], cfg["d_model"]))
    return x.astype(DType.of(cfg["dtype"]).np)


def rlx_block(cfg: dict):
    """The block as an RLX graph: input ``x``, one param per weight, output ``y``."""
    from rlx_core import Graph
    b, s, d, h, dt = cfg["batch"], cfg["seq"], cfg["d_model"], cfg["heads"], cfg["dtype"]
    g = Graph("encoder_block")
    x = g.input("x", (b, s, d), dt)
    p = {name: g.param(name, w.shape, dt) for name, w in block_weights(cfg).items()}

    def heads(t):  # [B, S, D] -> [B, H, S, D/H]
        return g.transpose(g.reshape(t, (b, s, h, d // h)), (0, 2, 1, 3))

    qkv = g.add(g.matmul(g.layer_norm(x, p["ln1_g"], p["ln1_b"]), p["w_qkv"]), p["b_qkv"])
    q, k, v = (heads(t) for t in g.split(qkv, [d, d, d], axis=-1))
    attn = g.reshape(g.transpose(g.attention(q, k, v), (0, 2, 1, 3)), (b, s, d))
    hidden = g.add(x, g.add(g.matmul(attn, p["w_o"]), p["b_o"]))
    up = g.gelu(g.add(g.matmul(g.layer_norm(hidden, p["ln2_g"], p["ln2_b"]), p["w_1"]), p["b_1"]))
    g.set_outputs([g.add(hidden, g.add(g.matmul(up, p["w_2"]), p["b_2"]))], names=["y"])
    return g


def jax_block(cfg: dict, idiomatic: bool = False):
    """The block written directly in JAX: ``fn(weights, x) -> y`` (see the module docstring)."""
    import jax.numpy as jnp
    b, s, d, h = cfg["batch"], cfg["seq"], cfg["d_model"], cfg["heads"]
    ops = _idiomatic_ops(d // h) if idiomatic else _rlx_numerics_ops(d // h)

    def heads(t):
        return t.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

    def block(w, x):
        add = ops.add
        qkv = add(ops.matmul(ops.layer_norm(x, w["ln1_g"], w["ln1_b"]), w["w_qkv"]), w["b_qkv"])
        q, k, v = (heads(t) for t in jnp.split(qkv, 3, axis=-1))
        attn = ops.attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, d)
        hidden = add(x, add(ops.matmul(attn, w["w_o"]), w["b_o"]))
        up = ops.gelu(add(ops.matmul(ops.layer_norm(hidden, w["ln2_g"], w["ln2_b"]), w["w_1"]), w["b_1"]))
        return add(hidden, add(ops.matmul(up, w["w_2"]), w["b_2"]))
    return block


def _rlx_numerics_ops(head_dim: int):
    """add, matmul, layer_norm, attention and gelu with the numbers RLX defines."""
    import jax.numpy as jnp
    from jax import lax
    f32, full = jnp.float32, lax.Precision.HIGHEST

    def in_f32(op):  # 16-bit values: computed in f32, rounded once to their dtype
        return lambda *xs: op(*(t.astype(f32) for t in xs)).astype(xs[0].dtype)

    def matmul(a, w):
        precision = full if a.dtype == f32 else None  # 16-bit products are exact in f32
        return jnp.matmul(a, w, precision=precision, preferred_element_type=f32).astype(a.dtype)

    @in_f32
    def layer_norm(x, gamma, beta):
        centered = x - jnp.mean(x, axis=-1, keepdims=True)
        return centered / jnp.sqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + 1e-5) * gamma + beta

    def attention(q, k, v):
        precision = full if q.dtype == f32 else None
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, precision=precision, preferred_element_type=f32)
        scores = scores * f32(1 / math.sqrt(head_dim))
        weights = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
        out = jnp.einsum("bhqk,bhkd->bhqd", weights, v.astype(f32), precision=full)
        return (out / jnp.sum(weights, axis=-1, keepdims=True)).astype(v.dtype)

    gelu = in_f32(lambda t: 0.5 * t * (1 + lax.erf(t / np.sqrt(2).astype(np.float32))))
    return argparse.Namespace(add=in_f32(jnp.add), matmul=matmul, layer_norm=layer_norm, attention=attention,
                              gelu=gelu)


def _idiomatic_ops(head_dim: int):
    """The same ops as JAX code usually writes them (XLA's default precision and dtypes)."""
    import jax
    import jax.numpy as jnp

    def layer_norm(x, gamma, beta):
        mean, var = jnp.mean(x, axis=-1, keepdims=True), jnp.var(x, axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta

    def attention(q, k, v):
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(head_dim).astype(q.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

    return argparse.Namespace(add=jnp.add, matmul=jnp.matmul, layer_norm=layer_norm, attention=attention,
                              gelu=lambda t: jax.nn.gelu(t, approximate=False))


# --- measuring ------------------------------------------------------------------------
def compile_rlx(cfg: dict, outputs: str, weights: dict):
    """The RLX block compiled on the tpu backend with ``weights`` as its params; returns
    (compiled, compile seconds). Given JAX arrays, the params are those very buffers."""
    import rlx_core
    from rlx_core import CompileOptions, Session
    from rlx_core.runtime import registry
    if not registry().entries.get("tpu"):
        import rlx_tpu.plugin
        rlx_core.register_backends(rlx_tpu.plugin)
    t0 = time.perf_counter()
    compiled = Session("tpu").compile(rlx_block(cfg), CompileOptions(backend={"outputs": outputs}))
    seconds = time.perf_counter() - t0
    compiled.set_params(weights)
    return compiled, seconds


def run_benchmark(cfg: dict, repeats: int) -> dict:
    import jax
    from rlx_tpu.platform import requested_platform
    platform = requested_platform()
    device = jax.devices(platform)[0]
    x_host = block_input(cfg)
    x_dev = jax.device_put(x_host, device)
    weights = {k: jax.device_put(v, device) for k, v in block_weights(cfg).items()}
    jax.jit(lambda t: t + 1).lower(x_dev).compile()  # XLA's one-time start-up, outside both compile times

    # Both models read the same weight buffers, so neither finds them colder in the caches.
    rlx_dev, rlx_compile_s = compile_rlx(cfg, "jax", weights)
    rlx_host, _ = compile_rlx(cfg, "numpy", weights)
    jitted = jax.jit(jax_block(cfg))
    idiomatic = jax.jit(jax_block(cfg, idiomatic=True))
    t0 = time.perf_counter()
    jitted.lower(weights, x_dev).compile()
    jax_compile_s = time.perf_counter() - t0

    launches = {  # device arrays in and out, not waited for
        "rlx_device": lambda: rlx_dev.run({"x": x_dev})[0],
        "rlx_launch": lambda: rlx_dev.executable.launch((x_dev,))[0],
        "jax_device": lambda: jitted(weights, x_dev),
        "jax_idiomatic_device": lambda: idiomatic(weights, x_dev),
    }
    host_calls = {
        "rlx_host": lambda: rlx_host.run({"x": x_host})[0],
        "jax_host": lambda: np.asarray(jitted(weights, x_host)),
        "jax_numpy_in": lambda: jitted(weights, x_host).block_until_ready(),
        "jax_numpy_out": lambda: np.asarray(jitted(weights, x_dev)),
    }
    times = interleaved_times({name: _waited(launch) for name, launch in launches.items()}, repeats)
    times.update(interleaved_times(host_calls, repeats))
    medians_ms = {name: 1e3 * statistics.median(ts) for name, ts in times.items()}
    pipelined = interleaved_times({name: _queued(launch, PIPELINE_DEPTH) for name, launch in launches.items()},
                                   max(repeats // PIPELINE_DEPTH, 5))

    y_rlx = np.asarray(rlx_host.run({"x": x_host})[0], np.float64)
    y_jax = np.asarray(jitted(weights, x_host), np.float64)
    scale = float(np.max(np.abs(y_jax)))
    return {
        "platform": platform, "device_kind": device.device_kind, "jax": jax.__version__,
        "python": host_platform.python_version(), "host": host_platform.machine(), "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),  # other work on the machine while it was measured
        "config": cfg, "repeats": repeats, "median_ms": medians_ms,
        "overhead_device": paired_ratio(times["rlx_device"], times["jax_device"]) - 1,
        "overhead_host": paired_ratio(times["rlx_host"], times["jax_host"]) - 1,
        "pipelined_ms": {name: 1e3 * statistics.median(ts) / PIPELINE_DEPTH for name, ts in pipelined.items()},
        "overhead_pipelined": paired_ratio(pipelined["rlx_device"], pipelined["jax_device"]) - 1,
        "run_split": medians_ms["rlx_host"] / medians_ms["rlx_launch"],
        "compile_s": {"rlx": rlx_compile_s, "jax": jax_compile_s},
        "max_abs_diff_rlx_vs_jax": float(np.max(np.abs(y_rlx - y_jax))), "output_scale": scale,
        "target_overhead": TARGET_OVERHEAD,
    }


def _waited(launch):
    return lambda: launch().block_until_ready()


def _queued(launch, depth: int):
    """``depth`` calls queued back to back, then waited for: the device time per call
    once the host's launches overlap the device's work (as in a serving loop)."""
    def calls():
        for _ in range(depth - 1):
            launch()
        launch().block_until_ready()
    return calls


def report(result: dict) -> str:
    cfg, ms = result["config"], result["median_ms"]
    lines = [f"transformer block {cfg} on {result['device_kind']} ({result['platform']}, jax {result['jax']}), "
             f"median of {result['repeats']}:",
             f"  {'path':<12} {'rlx ms':>9} {'jax ms':>9} {'overhead':>9}"]
    for path in ("device", "host"):
        over = result[f"overhead_{path}"]
        lines.append(f"  {path:<12} {ms[f'rlx_{path}']:>9.3f} {ms[f'jax_{path}']:>9.3f} {100 * over:>8.1f}%"
                     + ("" if over <= TARGET_OVERHEAD else "  (over the 10% target)"))
    pipe, over = result["pipelined_ms"], result["overhead_pipelined"]
    lines.append(f"  {'pipelined':<12} {pipe['rlx_device']:>9.3f} {pipe['jax_device']:>9.3f} {100 * over:>8.1f}%"
                 + ("" if over <= TARGET_OVERHEAD else "  (over the 10% target)"))
    lines.append(f"  idiomatic JAX (other numerics), device: {ms['jax_idiomatic_device']:.3f} ms")
    lines.append(f"  run-path split: run (numpy in/out) {ms['rlx_host']:.3f} ms / the XLA program alone "
                 f"{ms['rlx_launch']:.3f} ms = {result['run_split']:.2f}x; the numpy path adds "
                 f"{_us(ms['rlx_host'] - ms['rlx_launch'])} (jax.jit's {_us(ms['jax_host'] - ms['jax_device'])}: "
                 f"input {_us(ms['jax_numpy_in'] - ms['jax_device'])}, output "
                 f"{_us(ms['jax_numpy_out'] - ms['jax_device'])}); device arrays through run add "
                 f"{_us(ms['rlx_device'] - ms['rlx_launch'])}")
    lines.append(f"  compile: rlx {result['compile_s']['rlx']:.2f} s, jax {result['compile_s']['jax']:.2f} s; "
                 f"max |rlx - jax| = {result['max_abs_diff_rlx_vs_jax']:.3g} (outputs up to "
                 f"{result['output_scale']:.3g})")
    return "\n".join(lines)


def _us(ms: float) -> str:
    return f"{1e3 * ms:+.0f} us"


def default_output(result: dict) -> Path:
    name = "h200" if "H200" in result["device_kind"].upper() else result["platform"]
    return ROOT / "benchmarks" / "results" / f"tpu_{name}.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=None, help="default: d_model / 64")
    parser.add_argument("--ffn", type=int, default=None, help="default: 4 x d_model")
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        import rlx_core  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"cannot import rlx_core ({e}); it needs numpy, ml_dtypes and pluggy") from None
    cfg = block_config(args.batch, args.seq, args.d_model, args.heads, args.ffn, args.dtype)
    result = run_benchmark(cfg, args.repeats)
    print(report(result))
    out = args.output or default_output(result)
    write_results(out, result)
    print(f"wrote {out}")
    write_markdown(out.parent)
    return 0


def write_markdown(results_dir: Path) -> None:
    """``tpu.md``: one row per platform's latest ``tpu_*.json`` (what the README shows)."""
    rows = []
    for path in sorted(results_dir.glob("tpu_*.json")):
        r = json.loads(path.read_text())
        c, ms = r["config"], r["median_ms"]
        rows.append(f"| {r['platform']} ({r['device_kind']}) | b{c['batch']} s{c['seq']} d{c['d_model']} {c['dtype']} | "
                    f"{ms['rlx_device']:.3f} | {ms['jax_device']:.3f} | {100 * r['overhead_device']:+.1f}% | "
                    f"{100 * r['overhead_host']:+.1f}% | {100 * r['overhead_pipelined']:+.1f}% | "
                    f"{r['compile_s']['rlx']:.2f} / {r['compile_s']['jax']:.2f} |")
    (results_dir / "tpu.md").write_text(
        "| XLA platform | block | rlx-tpu ms | jax.jit ms | overhead (device arrays) | overhead (numpy) | "
        "overhead (pipelined) | compile s rlx / jax |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())

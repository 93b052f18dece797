"""rlx-tpu's sharded graphs against the same block sharded directly in JAX.

    RLX_TPU_PLATFORM=gpu python benchmarks/tpu_sharding_bench.py              # b8 s512 d1024 bf16, every GPU
    RLX_TPU_PLATFORM=gpu python benchmarks/tpu_sharding_bench.py --large      # the d4096 variant
    RLX_TPU_PLATFORM=cpu python benchmarks/tpu_sharding_bench.py --host-devices 8 --seq 128 --d-model 256 --dtype f32

The block is ``benchmarks/tpu_block.py``'s (pre-norm encoder layer, heads of 64, ffn 4 x
d_model): its RLX graph and its hand-written JAX twin with RLX's numerics, from the same
weights. Over a mesh of the ``--devices`` first devices (default: all JAX sees) it runs

* ``rlx_1`` / ``jax_1``: one device (``rlx_1`` is the baseline of the speed-ups);
* ``rlx_dp`` / ``jax_dp``: data parallel, the batch split over the mesh, weights replicated;
* ``rlx_tp`` / ``jax_tp``: tensor parallel, Megatron-style: the qkv and ffn-in weights split
  by columns, the attention-out and ffn-out weights by rows (:data:`TP_RULES`, the same
  table for both), the batch whole.

RLX compiles through ``Session("tpu", mesh=Sharding(...))``; JAX calls ``jax.jit`` of the
block on arguments placed with the same ``NamedSharding`` s. Inputs sit on the devices
already and outputs stay there, sharded as XLA leaves them (RLX ``outputs="sharded"``,
``outputs="jax"``); every call is waited for. Contenders alternate in shuffled rounds
(``common.interleaved_times``); the ratios are medians over rounds of paired times:
``rlx_X / jax_X`` (RLX's overhead over direct JAX, target <= 1.10) and ``rlx_1 / rlx_X``
(speed-up over one device; scaling efficiency = speed-up / devices). On one device the
meshes are trivial and the run only checks that every path works.

``--host-devices N`` makes XLA:CPU show N devices (``XLA_FLAGS``, set before JAX starts).
Results go to ``benchmarks/results/tpu_sharding_<platform>_<N>dev.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path += [str(ROOT), str(ROOT / "plugins" / "rlx-tpu")]  # where rlx_core / rlx_tpu are not installed
sys.path.append(str(Path(__file__).resolve().parent))  # common.py and tpu_block.py, also when loaded by path

from common import interleaved_times, markdown_table, paired_ratio, write_results  # noqa: E402

TARGET_RATIO = 1.10
# Megatron tensor parallelism for tpu_block's weights: column-parallel in, row-parallel out.
TP_RULES = {"w_qkv": (None, "model"), "b_qkv": ("model",), "w_o": ("model", None),
            "w_1": (None, "model"), "b_1": ("model",), "w_2": ("model", None)}
PATHS = ("dp", "tp")


def shardings(devices: int) -> dict:
    """The RLX Sharding of each parallel path over ``devices``."""
    from rlx_core.runtime import Sharding
    return {"dp": Sharding({"data": devices}, batch_axis="data", outputs="sharded"),
            "tp": Sharding({"model": devices}, params=TP_RULES, outputs="sharded")}


def collective_counts(hlo: str) -> dict[str, int]:
    import re
    kinds = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
    return {k: n for k in kinds if (n := len(re.findall(rf"\s{k}(?:-start)?\(", hlo)))}


def run_benchmark(cfg: dict, devices: int, repeats: int) -> dict:
    import jax

    import tpu_block
    from rlx_core import CompileOptions, Session, register_backends
    from rlx_core.runtime import registry
    from rlx_tpu.platform import requested_platform
    platform = requested_platform()
    available = jax.devices(platform)
    if devices > len(available):
        raise SystemExit(f"--devices {devices}: JAX sees {len(available)} '{platform}' device(s)")
    if not registry().entries.get("tpu"):  # the plugin where it is not installed
        import rlx_tpu.plugin
        register_backends(rlx_tpu.plugin)
    graph = tpu_block.rlx_block(cfg)
    weights, x_host = tpu_block.block_weights(cfg), tpu_block.block_input(cfg)
    on_device = CompileOptions(backend={"outputs": "jax"})

    one = Session("tpu").compile(graph, on_device)
    one.set_params(weights)
    x_one = jax.device_put(x_host, available[0])
    jax_block = jax.jit(tpu_block.jax_block(cfg))
    w_one = {name: jax.device_put(value, available[0]) for name, value in weights.items()}
    calls = {"rlx_1": lambda: one.run({"x": x_one})[0], "jax_1": lambda: jax_block(w_one, x_one)}
    compile_s, hlo = {}, {}
    outputs = {name: np.asarray(call(), np.float64) for name, call in calls.items()}
    for path, sharding in shardings(devices).items():
        t0 = time.perf_counter()
        compiled = Session("tpu", mesh=sharding).compile(graph, on_device)
        compile_s[f"rlx_{path}"] = time.perf_counter() - t0
        compiled.set_params(weights)
        placement = compiled.executable.program.placement
        x = jax.device_put(x_host, placement.inputs["x"])
        w = {name: jax.device_put(value, placement.params[name]) for name, value in weights.items()}
        t0 = time.perf_counter()
        jax_hlo = jax_block.lower(w, x).compile().as_text()
        compile_s[f"jax_{path}"] = time.perf_counter() - t0
        calls[f"rlx_{path}"] = (lambda c, x: lambda: c.run({"x": x})[0])(compiled, x)
        calls[f"jax_{path}"] = (lambda w, x: lambda: jax_block(w, x))(w, x)
        hlo[f"rlx_{path}"] = collective_counts(compiled.executable.hlo())
        hlo[f"jax_{path}"] = collective_counts(jax_hlo)
        for name in (f"rlx_{path}", f"jax_{path}"):
            outputs[name] = np.asarray(calls[name](), np.float64)

    times = interleaved_times({name: _waited(call) for name, call in calls.items()}, repeats)
    ratios = {"rlx_1_vs_jax_1": paired_ratio(times["rlx_1"], times["jax_1"])}
    for path in PATHS:
        ratios[f"rlx_{path}_vs_jax_{path}"] = paired_ratio(times[f"rlx_{path}"], times[f"jax_{path}"])
        ratios[f"speedup_rlx_{path}"] = paired_ratio(times["rlx_1"], times[f"rlx_{path}"])
        ratios[f"speedup_jax_{path}"] = paired_ratio(times["rlx_1"], times[f"jax_{path}"])
    want = outputs["rlx_1"]
    return {
        "platform": platform, "device_kind": available[0].device_kind, "devices": devices, "jax": jax.__version__,
        "cpus": os.cpu_count(), "load_average": os.getloadavg(), "config": cfg, "repeats": repeats,
        "median_ms": {name: 1e3 * statistics.median(ts) for name, ts in times.items()},
        "ratios": ratios, "collectives": hlo, "compile_s": compile_s, "target_ratio": TARGET_RATIO,
        "max_abs_diff_vs_rlx_1": {name: float(np.max(np.abs(out - want))) for name, out in outputs.items()},
        "output_scale": float(np.max(np.abs(want))),
    }


def _waited(call):
    return lambda: call().block_until_ready()


def report(r: dict) -> str:
    cfg, ms, ratio = r["config"], r["median_ms"], r["ratios"]
    head = (f"transformer block b{cfg['batch']} s{cfg['seq']} d{cfg['d_model']} {cfg['dtype']} on {r['devices']} x "
            f"{r['device_kind']} ({r['platform']}, jax {r['jax']}), median of {r['repeats']} rounds; "
            f"one device: RLX {ms['rlx_1']:.3f} ms, JAX {ms['jax_1']:.3f} ms, RLX / JAX "
            f"{ratio['rlx_1_vs_jax_1']:.3f}\n\n")
    rows = []
    for path, label in (("dp", "data parallel"), ("tp", "tensor parallel")):
        speedup = ratio[f"speedup_rlx_{path}"]
        rows.append([label, f"{ms[f'rlx_{path}']:.3f}", f"{ms[f'jax_{path}']:.3f}",
                     f"{ratio[f'rlx_{path}_vs_jax_{path}']:.3f}", f"{speedup:.2f}x",
                     f"{100 * speedup / r['devices']:.0f}%",
                     ", ".join(f"{k} {n}" for k, n in r["collectives"][f"rlx_{path}"].items()) or "none"])
    return head + markdown_table(["sharding", "RLX ms", "JAX ms", "RLX / JAX", "RLX speed-up vs 1 device",
                                  "scaling efficiency", "collectives in RLX's HLO"], rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--large", action="store_true", help="the d4096 variant (--d-model 4096)")
    parser.add_argument("--heads", type=int, default=None, help="default: d_model / 64")
    parser.add_argument("--dtype", default="bf16", choices=["f32", "bf16", "f16"])
    parser.add_argument("--devices", type=int, default=None, help="mesh size (default: every device JAX sees)")
    parser.add_argument("--host-devices", type=int, default=None,
                        help="XLA:CPU shows this many devices (set before JAX starts)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--output", type=Path, default=None, help="a .json path (default: results/tpu_sharding_...)")
    args = parser.parse_args(argv)
    if args.host_devices:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={args.host_devices}").strip()
    import jax
    from rlx_tpu.platform import requested_platform
    if args.host_devices and len(jax.devices("cpu")) < args.host_devices:
        raise SystemExit(f"--host-devices {args.host_devices}: JAX started before the flag was set "
                         f"(run the script on its own)")
    cfg = __import__("tpu_block").block_config(args.batch, args.seq, 4096 if args.large else args.d_model,
                                                args.heads, dtype=args.dtype)
    devices = args.devices or len(jax.devices(requested_platform()))
    result = run_benchmark(cfg, devices, args.repeats)
    text = report(result)
    print(text)
    target = args.output or f"tpu_sharding_{result['platform']}_{devices}dev"
    json_path, _ = write_results(target, result, text)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GGML block formats for KV rows: quantize / dequantize throughput against gguf's numpy
reference (same bytes), GGML's byte sizes, round-trip error, and a 100k-token
file-backed history whose resident memory stays far below its size.

    python benchmarks/llm_kvquant.py [--quick]

Targets: q8_0 and q4_0 quantize >= 1 GB/s of f32 input; 34 and 18 bytes per 32 values;
round-trip error within GGML's bound (test-quantize-fns: sqrt(sum err^2) / n < 0.002).
"""
from __future__ import annotations

import argparse
import functools
import tempfile
import time

import numpy as np
from llm_common import md_table, median_seconds, print_table, save_section

from rlx_core.llm import KV_FORMATS, QuantizedKVCache, dequantize, kvquant, quantize

TARGET_GBPS = 1.0
GGML_TOTAL_ERROR = 0.002


def throughput(values: np.ndarray, workers: int | None = None) -> list[dict]:
    """GB/s of f32 for quantize (input) and dequantize (output), per format."""
    saved = kvquant._WORKERS
    kvquant._WORKERS = workers or saved
    try:
        out = []
        for name, fmt in KV_FORMATS.items():
            data = quantize(values, fmt)
            q = median_seconds(functools.partial(quantize, values, fmt), repeat=7, warmup=1)
            d = median_seconds(functools.partial(dequantize, data, fmt), repeat=7, warmup=1)
            out.append({"format": name, "quantize_gbps": round(values.nbytes / q / 1e9, 2),
                        "dequantize_gbps": round(values.nbytes / d / 1e9, 2),
                        "bytes_per_32": fmt.row_bytes(32), "bits_per_value": fmt.bits_per_value})
        return out
    finally:
        kvquant._WORKERS = saved


def gguf_quantize_gbps(values: np.ndarray) -> dict:
    """gguf's numpy reference quantizers (the bit-exactness oracle) on the same input."""
    try:
        import gguf
    except ImportError:
        return {}
    types = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
             "q5_0": gguf.GGMLQuantizationType.Q5_0, "f16": gguf.GGMLQuantizationType.F16}
    rows = values.reshape(-1, 4096)
    out = {}
    for name, qtype in types.items():
        assert gguf.quants.quantize(rows[:64], qtype).tobytes() == quantize(rows[:64], name).tobytes()
        seconds = median_seconds(functools.partial(gguf.quants.quantize, rows, qtype), repeat=3, warmup=1)
        out[name] = round(values.nbytes / seconds / 1e9, 3)
    return out


def round_trip_errors() -> list[dict]:
    n = 32 * 128
    ggml_data = (0.1 + 2 * np.cos(np.arange(n, dtype=np.float32))).astype(np.float32)
    normal = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    out = []
    for name in KV_FORMATS:
        ggml_metric = float(np.sqrt(np.sum((ggml_data - dequantize(quantize(ggml_data, name), name)) ** 2)) / n)
        err = dequantize(quantize(normal, name), name) - normal
        out.append({"format": name, "ggml_total_error": round(ggml_metric, 6),
                    "within_ggml_bound": ggml_metric < GGML_TOTAL_ERROR,
                    "rmse_normal": float(f"{np.sqrt(np.mean(err ** 2)):.3g}"),
                    "max_abs_normal": float(f"{np.abs(err).max():.3g}")})
    return out


def resident_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def file_backed_history(tokens: int, layers: int, kv_dim: int, fmt: str) -> dict:
    """Append a ``tokens``-long history to file-backed layers in 4096-token chunks, then
    stream single-query attention over all of it; track resident memory throughout."""
    chunk = 4096
    rng = np.random.default_rng(1)
    base = rng.standard_normal((chunk, kv_dim)).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="rlx-kv-") as directory:
        start_rss = peak = resident_mib()
        cache = QuantizedKVCache(layers, kv_dim, fmt, capacity=tokens, directory=directory)
        t0 = time.perf_counter()
        for first in range(0, tokens, chunk):
            rows = base[:min(chunk, tokens - first)] * np.float32(1 + first / tokens)
            for layer in cache.layers:
                layer.append(rows, -rows)
            peak = max(peak, resident_mib())
            if first % (tokens // 5 // chunk * chunk or chunk) == 0:
                print(f"    appended {first + len(rows):>7} / {tokens} tokens, resident {resident_mib():.0f} MiB")
        append_s = time.perf_counter() - t0
        q = rng.standard_normal((32, kv_dim // 32)).astype(np.float32)      # 32 query heads
        t0 = time.perf_counter()
        for layer in cache.layers:
            layer.attend(q, num_heads=32, chunk_tokens=8192)
            peak = max(peak, resident_mib())
        attend_s = (time.perf_counter() - t0) / layers
        file_mib = cache.layers[0].nbytes * layers / 2 ** 20
        cache.close()
    return {"tokens": tokens, "layers": layers, "kv_dim": kv_dim, "format": fmt, "file_mib": round(file_mib, 1),
            "resident_growth_mib": round(peak - start_rss, 1), "append_tokens_per_s": round(tokens / append_s),
            "attend_ms_per_layer": round(attend_s * 1e3, 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run)")
    args = parser.parse_args(argv)
    values = np.random.default_rng(0).standard_normal((4 if args.quick else 16) << 20).astype(np.float32)

    print(f"throughput on {values.nbytes >> 20} MiB of f32 (GB/s of f32)")
    all_threads, one_thread = throughput(values), throughput(values, workers=1)
    gguf_gbps = gguf_quantize_gbps(values)
    rows = [[r["format"], r["bytes_per_32"], r["bits_per_value"], r["quantize_gbps"], s["quantize_gbps"],
             r["dequantize_gbps"], gguf_gbps.get(r["format"], "-")] for r, s in zip(all_threads, one_thread)]
    headers = ["format", "bytes/32", "bits/value", f"quantize ({kvquant._WORKERS} threads)", "quantize (1 thread)",
               "dequantize", "gguf quantize"]
    print_table(headers, rows)

    errors = round_trip_errors()
    print("\nround-trip error")
    print_table(list(errors[0]), [list(e.values()) for e in errors])

    print("\nfile-backed history")
    history = file_backed_history(20_000 if args.quick else 100_000, 2, 1024, "q8_0")
    print(f"    {history}")

    by_name = {r["format"]: r for r in all_threads}
    checks = {"q8_0 >= 1 GB/s": by_name["q8_0"]["quantize_gbps"] >= TARGET_GBPS,
              "q4_0 >= 1 GB/s": by_name["q4_0"]["quantize_gbps"] >= TARGET_GBPS,
              "GGML sizes 34/18 B": (by_name["q8_0"]["bytes_per_32"], by_name["q4_0"]["bytes_per_32"]) == (34, 18),
              "GGML error bound": all(e["within_ggml_bound"] for e in errors if e["format"] != "f16")}
    for label, ok in checks.items():
        print(f"target {label}: {'PASS' if ok else 'FAIL'}")

    file_note = (f"File-backed (memory-mapped) history: {history['tokens']} tokens x {history['layers']} layers of "
                 f"{history['kv_dim']} {history['format']} values = {history['file_mib']} MiB on disk; resident memory "
                 f"grew by {history['resident_growth_mib']} MiB; append {history['append_tokens_per_s']} tokens/s; "
                 f"streaming attention over the whole history {history['attend_ms_per_layer']} ms per layer.")
    markdown = "\n\n".join([
        "Targets: " + ", ".join(f"{k}: **{'PASS' if v else 'FAIL'}**" for k, v in checks.items()) + ".",
        md_table(headers, rows), md_table(list(errors[0]), [list(e.values()) for e in errors]), file_note])
    save_section("kvquant", {"throughput": all_threads, "throughput_one_thread": one_thread,
                             "gguf_quantize_gbps": gguf_gbps, "round_trip": errors, "file_backed": history,
                             "targets": checks}, markdown)


if __name__ == "__main__":
    main()

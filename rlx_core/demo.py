"""``rlx demo``: one transformer block, compiled on every available device, each checked
against the reference interpreter, with timings, in one table."""
from __future__ import annotations

import statistics
import time

import numpy as np

from .errors import RlxError
from .ir import Graph
from .reference import evaluate
from .runtime import Session
from .runtime.registry import iter_entries, registry
from .select import DevicePolicy, device_report
from .testing.compare import mismatch_report

__all__ = ["transformer_block", "run_demo"]


def transformer_block(d_model: int = 64, heads: int = 4, seq: int = 32, ffn: int = 128, batch: int = 1,
                      dtype: str = "f32") -> Graph:
    """A pre-norm encoder block: x + attn(ln1(x)), then + ffn(ln2(.)) with a GELU MLP."""
    g = Graph("transformer_block")
    hd = d_model // heads
    x = g.input("x", (batch, seq, d_model), dtype)

    def p(name, *dims):
        return g.param(name, dims, dtype)

    def heads_first(t):  # [B, S, D] -> [B, H, S, hd]
        return g.transpose(g.reshape(t, (batch, seq, heads, hd)), (0, 2, 1, 3))

    h = g.layer_norm(x, p("ln1_g", d_model), p("ln1_b", d_model), axis=-1, eps=1e-5)
    q, k, v = (heads_first(h @ p(f"w{n}", d_model, d_model) + p(f"b{n}", d_model)) for n in "qkv")
    a = g.attention(q, k, v)
    a = g.reshape(g.transpose(a, (0, 2, 1, 3)), (batch, seq, d_model))
    x = x + (a @ p("wo", d_model, d_model) + p("bo", d_model))
    h = g.layer_norm(x, p("ln2_g", d_model), p("ln2_b", d_model), axis=-1, eps=1e-5)
    h = g.gelu(h @ p("w1", d_model, ffn) + p("b1", ffn)) @ p("w2", ffn, d_model) + p("b2", d_model)
    g.set_outputs([x + h], names=["y"])
    return g


def random_params(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Small random weights (norm gains near 1) for every param of ``g``."""
    rng = np.random.default_rng(seed)
    out = {}
    for n in g.param_nodes:
        dims, dt = n.attrs["dims"], n.attrs["dtype"]
        scale = 1.0 / np.sqrt(dims[0]) if len(dims) == 2 else 0.1
        base = 1.0 if n.attrs["name"].endswith("_g") else 0.0
        out[n.attrs["name"]] = (base + scale * rng.standard_normal(dims)).astype(dt.np)
    return out


def run_demo(devices: list[str] | None = None, runs: int = 20) -> int:
    """Every available device (or ``devices``) runs the block; the table marks the device the
    cost model picks (``pick``) and the one measured fastest (``fastest``)."""
    g = transformer_block()
    params = random_params(g)
    x = np.random.default_rng(1).standard_normal(g.input_nodes[0].attrs["dims"]).astype(np.float32)
    expected = evaluate(g, {"x": x}, params)[0]
    entries = [e for e in iter_entries(registry()) if devices is None or e.device.label in devices]
    print(f"transformer block: batch 1, seq 32, d_model 64, 4 heads, ffn 128 ({len(g)} nodes)\n")
    print("cost model: calibrating each device once (cached under $XDG_CACHE_HOME/rlx) ...", flush=True)
    policy = DevicePolicy.only(devices) if devices else None
    picked = {r.label for r in device_report(g, policy, probe="full", calibrate=True) if r.recommended}
    rows, failures, medians = [], 0, {}
    for e in entries:
        avail = e.availability()
        if not avail.ok:
            rows.append((e.device.label, e.name, "unavailable", "", "", "", "", avail.reason[:60]))
            continue
        try:
            t0 = time.perf_counter()
            compiled = Session(e.device).compile(g)
            compile_ms = (time.perf_counter() - t0) * 1e3
            compiled.set_params(params)
            got = compiled.run({"x": x})[0]
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                compiled.run({"x": x})
                times.append((time.perf_counter() - t0) * 1e3)
            err = float(np.max(np.abs(np.asarray(got, np.float64) - expected)))
            ok = mismatch_report(np.asarray(got), expected, g.output_shapes[0].dtype) is None
            failures += not ok
            medians[e.device.label] = statistics.median(times)
            rows.append((e.device.label, e.name, "ok" if ok else "MISMATCH", f"{compile_ms:.1f}",
                         f"{medians[e.device.label]:.3f}", f"{err:.2e}", "", avail.reason[:60]))
        except RlxError as err:
            failures += 1
            rows.append((e.device.label, e.name, "error", "", "", "", "", f"{type(err).__name__}: {err}"[:60]))
    fastest = min(medians, key=medians.get) if medians else None
    rows = [r[:6] + (" ".join(m for m, hit in (("pick", r[0] in picked), ("fastest", r[0] == fastest)) if hit),)
            + r[7:] for r in rows]
    from .cli import format_table
    print(format_table(["device", "backend", "check", "compile ms", "run ms (median)", "max |err|", "selection",
                        "detail"], rows))
    return 1 if failures else 0

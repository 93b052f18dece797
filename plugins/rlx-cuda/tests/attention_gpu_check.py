"""Attention on the GPU, every kernel on every configuration, as one diagnostic table.

    python plugins/rlx-cuda/tests/attention_gpu_check.py     (exit status 1 on any failure)

Each configuration (those of ``test_attention.py``, the benchmark shapes, a fragment
layout probe, and the transformer block with and without view folding) runs under
every attention kernel that applies -- flash, flash with forced key splits, decode,
decode with splits, the cuBLAS path -- and is compared with the reference
interpreter. A failing row says where the error is (worst element's (b, h, i, c), which
query rows / heads / output columns are wrong, NaNs), so a broken kernel can be told
apart from a broken fold or split merge, and the ``attention`` / ``fold_views``
backend options can route around it. ``test_device_attention.py`` runs the same table.
"""
from __future__ import annotations

import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from rlx_core import CompileOptions, Session  # noqa: E402
from rlx_core.reference import evaluate  # noqa: E402
from rlx_core.testing.compare import tolerance  # noqa: E402
from rlx_cuda.steps import Launch  # noqa: E402

from test_attention import CONFIGS, F32_CONFIGS, _block, _feeds, _graph  # noqa: E402

MODES = [("flash", {}), ("flash", {"attention_splits": 3}), ("decode", {}), ("decode", {"attention_splits": 4}),
         ("cublas", {})]
BENCH_CONFIGS = [
    ("bench/block-causal", "bf16", (8, 16, 16, 512, 512, 64, 64), dict(mask="causal"), None),
    ("bench/decode-cache129", "bf16", (1, 16, 16, 1, 129, 64, 64), dict(), None),
    ("long-cache/gqa4-d128", "bf16", (1, 32, 8, 1, 4096, 128, 128), dict(mask="causal"), None),
    ("prefill/gqa2-d128/sliding", "f16", (2, 8, 4, 300, 300, 128, 128), dict(mask="sliding", window=128), None),
]


def _compile(graph, backend):
    return Session("cuda", options=CompileOptions(backend=backend)).compile(graph)


def _kernel_name(action) -> str:
    if not isinstance(action, Launch):
        return type(action).__name__.lower()  # gemm, memset
    for marker, name in (("mma.sync", "flash"), ("rlx_attn_score", "decode"), ("top = -", "combine"),
                         ("probs", "softmax")):
        if marker in action.source:
            return name
    return "kernel"


def _used_kernels(compiled) -> str:
    """The actions of the attention step(s), e.g. "flash+combine" or "gemm*2+softmax"."""
    labels = []
    for step in compiled.executable.steps:
        if "attention" in step.label:
            counts = Counter(_kernel_name(a) for a in step.actions)
            labels.append("+".join(k if n == 1 else f"{k}*{n}" for k, n in counts.items()))
    return ",".join(labels) or "-"


def _where(bad: np.ndarray, dims) -> str:
    """Which coordinates of a [B, H, S, C] output hold the mismatches."""
    if bad.ndim != 4:
        return ""
    parts = []
    for axis, name in enumerate("bhic"):
        hit = np.unique(np.nonzero(bad)[axis])
        shown = ",".join(map(str, hit[:8])) + (",..." if len(hit) > 8 else "")
        parts.append(f"{name}[{len(hit)}/{dims[axis]}]={shown}")
    return " ".join(parts)


def compare(got: np.ndarray, want: np.ndarray, dtype, scale: float = 2.0) -> str | None:
    """None when ``got`` matches ``want``; else a one-line diagnosis."""
    rtol, atol = tolerance(dtype, scale)
    a, e = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    err = np.where(bad, np.abs(a - e), 0)
    worst = np.unravel_index(np.nanargmax(np.nan_to_num(err, nan=np.inf)), a.shape)
    return (f"{bad.mean():.1%} bad, nan got/want {np.isnan(a).sum()}/{np.isnan(e).sum()}, "
            f"worst at {tuple(map(int, worst))} got {a[worst]:.5g} want {e[worst]:.5g}; {_where(bad, a.shape)}")


def _layout_probe(dtype="bf16"):
    """Query row i sees only key i % 16 (scores 0 or 64), V[j, c] = j + c / 16 (exact in
    bf16): output (i, c) must be (i % 16) + c / 16. A wrong mma / ldmatrix fragment
    layout shows as a permutation, decoded in the failure message."""
    from rlx_core import Graph
    g = Graph("layout-probe")
    q = g.input("q", (1, 1, 64, 16), dtype)
    k = g.input("k", (1, 1, 16, 16), dtype)
    v = g.input("v", (1, 1, 16, 16), dtype)
    g.set_outputs([g.attention(q, k, v, scale=1.0)])
    eye = np.eye(16, dtype=np.float32)
    feeds = {"q": (8 * np.tile(eye, (4, 1)))[None, None], "k": (8 * eye)[None, None],
             "v": (np.arange(16)[:, None] + np.arange(16)[None, :] / 16).astype(np.float32)[None, None]}
    from rlx_core.ir import DType
    return g, {n: a.astype(DType.of(dtype).np) for n, a in feeds.items()}


def _decode_probe(out: np.ndarray) -> str:
    """For the layout probe: which (key, column) each wrong output element came from."""
    o = np.asarray(out, np.float64)[0, 0]
    lines = []
    for i, c in zip(*np.nonzero(np.abs(o - ((np.arange(64) % 16)[:, None] + np.arange(16) / 16)) > 1e-3)):
        key, col = np.floor(o[i, c]), (o[i, c] - np.floor(o[i, c])) * 16
        lines.append(f"({i},{c})<-key {key:g} col {col:g}")
        if len(lines) == 12:
            break
    return "; ".join(lines)


def _cases():
    """(name, graph, feeds, dtype) of every configuration, the most telling first (the
    table is printed as it goes, so a timeout still leaves them in the log)."""
    g, feeds = _layout_probe()
    yield "layout-probe", g, feeds, g.output_shapes[0].dtype
    for cfg in BENCH_CONFIGS:
        g = _graph([cfg])
        yield cfg[0], g, _feeds(g), g.output_shapes[0].dtype
    for name, kwargs in (("block/prefill", dict(s=64)), ("block/decode-cache", dict(s=1, kv_cache=100))):
        g = _block(**kwargs)
        feeds = _feeds(g)
        for w in ("w", "wo"):
            feeds[w] = feeds[w] / 8
        yield name, g, feeds, g.output_shapes[0].dtype
    for cfg in CONFIGS + F32_CONFIGS:
        g = _graph([cfg])
        yield cfg[0], g, _feeds(g), g.output_shapes[0].dtype


def run(out=print) -> list[str]:
    """Print the table; return the failing rows."""
    from rlx_cuda.probe import probe
    available = probe()
    if not available.ok:
        out(f"attention gpu check: no CUDA device ({available.reason})")
        return [available.reason]
    failures = []
    out(f"{'configuration':32} {'mode':16} {'kernels':22} {'ms':>7}  result")
    for name, g, feeds, dtype in _cases():
        want = evaluate(g, feeds, {})[0]
        modes = MODES + ([("auto", {"fold_views": False})] if name.startswith("block") else [])
        for mode, extra in modes:
            label = mode + "".join(f" {k.split('_')[-1]}={v}" for k, v in extra.items())
            backend = {"attention": mode, **extra}
            t0 = time.perf_counter()
            try:
                c = _compile(g, backend)
                got = c.run(feeds)[0]
                kernels = _used_kernels(c)
                if mode in ("flash", "decode") and mode not in kernels:
                    out(f"{name:32} {label:16} {kernels:22} {'':>7}  n/a (falls back)")
                    continue
                problem = compare(got, want, dtype)
                if problem and name == "layout-probe":
                    problem += " | " + _decode_probe(got)
            except Exception as e:  # report and go on: the table is the diagnosis
                kernels, problem = "?", f"ERROR {type(e).__name__}: {e}"[:600] + "\n" + traceback.format_exc()[-1200:]
            ms = (time.perf_counter() - t0) * 1e3
            row = f"{name:32} {label:16} {kernels:22} {ms:7.0f}  {'ok' if problem is None else 'FAIL ' + problem}"
            out(row)
            if problem is not None:
                failures.append(row)
    out(f"attention gpu check: {len(failures)} failing row(s)")
    return failures


if __name__ == "__main__":
    sys.exit(1 if run() else 0)

"""``rlx run MODEL.onnx``: import an ONNX model, pick a device, compile, run, report.

    rlx run model.onnx                                  # random inputs of the declared shapes
    rlx run model.onnx --input x=x.npy --device cpu     # given inputs (their shapes fix symbolic dims)
    rlx run model.onnx --shape x=1,3,224,224 --check    # and compare with onnxruntime
    rlx run model.onnx --weights model.safetensors      # params from a weight file (.safetensors/.gguf/.npz)
    rlx run model.onnx --explain                        # and what each graph pass changed

Prints the chosen device, import / compile / run times and each output's shape, dtype
and value range. ``--check`` runs onnxruntime on the same inputs and fails (exit 1)
when an output differs by more than ``--atol + --rtol * |expected|``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

__all__ = ["cmd_run", "setup_run"]


def setup_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .onnx file (external data is read from its folder)")
    p.add_argument("--device", default="auto",
                   help="a device name (cpu, cuda, ...) or auto (default): RLX_DEVICE if set, else the device "
                        "the cost model rates fastest among those the RLX_* policy allows (RLX_DEVICES, "
                        "RLX_DENY_DEVICES, RLX_PREFER_DEVICES) that support every node; software GPU adapters "
                        "(lavapipe, SwiftShader, WARP) only when measured faster (RLX_BENCHMARK_PICK=N times "
                        "every candidate N runs on these inputs)")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="an input's value (repeatable); inputs not given get seeded random values")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="dims for an input with symbolic dimensions (repeatable)")
    p.add_argument("--repeat", type=int, default=10, help="timed runs after the first (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--check", action="store_true", help="compare the outputs with onnxruntime's")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance of --check (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of --check (default 1e-4)")
    p.add_argument("--save", metavar="FILE.npz", help="write the outputs to this .npz file")
    p.add_argument("--explain", action="store_true",
                   help="print what each graph pass changed before compiling (fused, folded and removed nodes, "
                        "named by their ONNX nodes); RLX_PASSES=none turns the passes off")
    p.add_argument("--weights", metavar="FILE",
                   help="set the model's params from a .safetensors, .gguf (quantized tensors dequantized) or .npz "
                        "file instead of its initializers: every param by name, each checked for dims and dtype "
                        "before any is set")


def cmd_run(args) -> int:
    """Import an ONNX model, pick a device (--device auto: the RLX_* policy and the cost
    model, as everywhere), compile, run it and print output shapes and timings; --check
    compares with onnxruntime."""
    from .errors import RlxError
    try:
        return _run(args)
    except _UsageError as e:
        print(f"rlx run: error: {e}", file=sys.stderr)
        return 2
    except RlxError as e:
        print(f"rlx run: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


class _UsageError(Exception):
    pass


def _run(args) -> int:
    from .frontends.onnx import load_onnx_for, require_onnx

    if args.check:
        _require_onnxruntime()
    onnx = require_onnx()
    t0 = time.perf_counter()
    try:
        proto = onnx.load(args.model, load_external_data=False)  # the importer reads it, from the model's folder
    except Exception as e:
        raise _UsageError(f"cannot read ONNX model {args.model!r}: {e}") from None
    feeds = _feeds(proto, _named(args.input, "--input", np.load), _named(args.shape, "--shape", _dims),
                   args.seed)
    model = load_onnx_for(proto, feeds, base_dir=os.path.dirname(os.path.abspath(args.model)))
    t_import = time.perf_counter() - t0
    print(f"model   {args.model}: {len(model.graph)} nodes, opset {model.opset}, imported in {_ms(t_import)}")
    params = _weights(model.graph, args.weights) if args.weights else model.params
    runtime_feeds = {n: feeds[n] for n in model.input_names}
    runner, pick = _choose_device(model.graph, args.device, params, runtime_feeds)
    print(f"device  {pick.device} ({_describe(pick, args.device)})")
    t0 = time.perf_counter()
    compiled = runner.compile(pick.device)  # (params replayed onto it)
    t_compile = time.perf_counter() - t0
    if args.explain:
        print(compiled.explain())
    t0 = time.perf_counter()
    outputs = compiled.run(runtime_feeds)
    t_first = time.perf_counter() - t0
    times = []
    for _ in range(max(args.repeat, 0)):
        t0 = time.perf_counter()
        compiled.run(runtime_feeds)
        times.append(time.perf_counter() - t0)
    timing = f"compile {_ms(t_compile)}, first run {_ms(t_first)}"
    if times:
        timing += f", median of {len(times)} runs {_ms(statistics.median(times))} (min {_ms(min(times))})"
    print(f"timing  {timing}")
    outputs = [np.asarray(o) for o in outputs]
    expected = _onnxruntime(args.model, feeds) if args.check else None
    print(_output_table(model.output_names, outputs, expected, args.rtol, args.atol))
    if args.save:
        np.savez(args.save, **dict(zip(model.output_names, outputs)))
        print(f"outputs saved to {args.save}")
    if expected is None:
        return 0
    bad = [n for n, o, e in zip(model.output_names, outputs, expected) if not _close(o, e, args.rtol, args.atol)]
    if bad:
        print(f"check FAILED: {', '.join(bad)} differ from onnxruntime beyond atol={args.atol}, rtol={args.rtol}")
        return 1
    print(f"check passed: every output matches onnxruntime (atol={args.atol}, rtol={args.rtol})")
    return 0


def _weights(graph, path: str) -> dict[str, np.ndarray]:
    """Every param of ``graph`` from the weight file at ``path`` (all checked first)."""
    from .weights import open_weights, read_weights
    t0 = time.perf_counter()
    options = {"dequantize": True} if path.lower().endswith(".gguf") else {}
    with open_weights(path, **options) as loader:
        values = read_weights(graph, loader)
    print(f"weights {path}: {len(values)} tensors, read in {_ms(time.perf_counter() - t0)}")
    return values


def _named(items, flag, parse):
    """``["name=value", ...]`` -> ``{name: parse(value)}``."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise _UsageError(f"{flag} takes NAME=VALUE, got {item!r}")
        try:
            out[name] = parse(value)
        except (OSError, ValueError) as e:
            raise _UsageError(f"{flag} {item!r}: {e}") from None
    return out


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",") if d.strip())


def _feeds(proto, given: dict, shapes: dict, seed: int) -> dict[str, np.ndarray]:
    """Every graph input's value: given, else seeded random data of its declared (or
    ``--shape``) dims: normal floats, small non-negative integers, random bools."""
    from .frontends.onnx import onnx_dtype
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in initializers]
    unknown = (set(given) | set(shapes)) - {vi.name for vi in inputs}
    if unknown:
        raise _UsageError(f"the model has no input(s) {sorted(unknown)}; its inputs: {[vi.name for vi in inputs]}")
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in inputs:
        dtype = onnx_dtype(vi.type.tensor_type.elem_type)
        if vi.name in given:
            feeds[vi.name] = np.asarray(given[vi.name]).astype(dtype.np, copy=False)
            continue
        dims = shapes.get(vi.name) or _declared_dims(vi)
        if dtype.is_float:
            feeds[vi.name] = rng.standard_normal(dims).astype(dtype.np)
        elif dtype.is_bool:
            feeds[vi.name] = rng.random(dims) < 0.5
        else:
            feeds[vi.name] = rng.integers(0, 4, dims).astype(dtype.np)
    return feeds


def _declared_dims(vi) -> tuple[int, ...]:
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            raise _UsageError(f"input '{vi.name}' has a symbolic dimension '{d.dim_param or '?'}': give its "
                              f"dims with --shape {vi.name}=... or a value with --input {vi.name}=FILE.npy")
        dims.append(d.dim_value)
    return tuple(dims)


def _choose_device(graph, requested: str, params=None, inputs=None):
    """``(runner, pick)``: a ``GraphDevices`` over ``graph`` holding ``params``, under
    ``DevicePolicy.from_env()``, and its :class:`~rlx_core.select.DevicePick` -- the pick
    every entry point makes (``pick_device``): ``requested`` unless ``auto``, else
    ``RLX_DEVICE``, else a benchmark on ``inputs`` when ``RLX_BENCHMARK_PICK`` asks, else the
    cost model, software adapters only when measured faster."""
    from .select import DevicePolicy, GraphDevices
    runner = GraphDevices(graph, DevicePolicy.from_env())
    runner.set_params(params or {})
    return runner, runner.pick(None if requested == "auto" else requested, inputs)


def _describe(pick, requested: str) -> str:
    if pick.how == "requested":
        return "requested"
    if pick.how == "environment":
        return pick.reason
    return f"auto: {pick.reason}"


def _require_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        from .runtime.registry import install_hint
        raise _UsageError(f"--check needs onnxruntime: {install_hint('onnx')}") from None
    return onnxruntime


def _onnxruntime(path: str, feeds) -> list[np.ndarray]:
    session = _require_onnxruntime().InferenceSession(path, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})]


def _close(got, expected, rtol, atol) -> bool:
    if got.shape != expected.shape:
        return False
    if expected.dtype.kind in "biu":
        return bool(np.array_equal(got, expected))
    return bool(np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                            equal_nan=True))


def _output_table(names, outputs, expected, rtol, atol) -> str:
    from .cli import format_table
    header = ["output", "shape", "dtype", "min", "max", "mean"]
    if expected is not None:
        header += ["max |diff| vs onnxruntime", "check"]
    rows = []
    for i, (name, out) in enumerate(zip(names, outputs)):
        numeric = out.size and out.dtype.kind in "fiub"
        stats = ([f"{out.min():.4g}", f"{out.max():.4g}", f"{out.astype(np.float64).mean():.4g}"] if numeric
                 else ["-", "-", "-"])
        row = [name, "x".join(map(str, out.shape)) or "scalar", str(out.dtype)] + stats
        if expected is not None:
            e = expected[i]
            diff = (f"{np.abs(out.astype(np.float64) - e.astype(np.float64)).max():.3g}"
                    if out.shape == e.shape and out.size else ("shape " + str(e.shape) if out.shape != e.shape
                                                               else "-"))
            row += [diff, "ok" if _close(out, e, rtol, atol) else "FAIL"]
        rows.append(tuple(row))
    return format_table(header, rows)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"

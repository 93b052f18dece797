"""``rlx serve MODEL``: serve a model on a local Ray cluster until interrupted.

    rlx serve model.onnx --replicas 2 --port 8000
    rlx serve model.onnx --devices cuda --replicas 2 --gpus-per-replica 0.5   # two replicas on one GPU

Ray's node and Serve's HTTP proxy listen on 127.0.0.1 only (``rlx_serve.local``). The
``rlx`` command reaches this module through ``rlx_core.cli_serve``; importing it loads
argparse alone, so building ``rlx``'s parser never imports Ray.

Exit status: 0 after Ctrl-C or SIGTERM, 2 on a bad argument or setting (a model or weights
file that cannot be read included), 1 when the model could not be served.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import threading

__all__ = ["setup", "run"]


def setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an .onnx model or a graph .json file")
    p.add_argument("--replicas", type=int, default=1, help="model replicas (default 1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port on 127.0.0.1 (default 8000)")
    p.add_argument("--devices", default=None, metavar="LIST",
                   help="devices the replicas may use, e.g. cuda or cpu (default: RLX_DEVICES, else every device "
                        "this machine has); the first one says what a replica asks Ray for (cuda/rocm: a GPU)")
    p.add_argument("--weights", metavar="FILE.npz", help="param values (replacing an ONNX model's initializers)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="dims of an ONNX input with symbolic dims other than the batch dim (repeatable)")
    p.add_argument("--max-batch-size", type=int, default=None,
                   help="rows per graph run; turns batching on (default: on, 8 rows, for an ONNX model with a "
                        "symbolic batch dim; off otherwise)")
    p.add_argument("--batch-wait-ms", type=float, default=5.0,
                   help="how long a batch waits for more requests after its first (default 5); turns batching on")
    p.add_argument("--no-batching", action="store_true", help="run every request alone")
    p.add_argument("--cpus", type=int, default=None, help="CPUs the local Ray node offers (default: all)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the local Ray node offers (default: those it finds)")
    p.add_argument("--cpus-per-replica", type=float, default=None, help="default 1")
    p.add_argument("--gpus-per-replica", type=float, default=None,
                   help="default 1 when the first allowed device is cuda or rocm, else 0; 0.5 shares a GPU by two")
    p.add_argument("--name", default="rlx", help="Serve application name (default rlx)")
    p.add_argument("--route-prefix", default="/", help="HTTP route (default /)")


def run(args) -> int:
    """Start Ray and Serve on loopback, deploy, print where it listens, wait for a signal."""
    from rlx_core.errors import ParamError, PolicyError, RlxError
    from .errors import ServeConfigError
    if importlib.util.find_spec("ray") is None:
        from rlx_core.runtime.registry import install_hint
        print(f"rlx serve: Ray Serve is not installed: {install_hint('serve')}", file=sys.stderr)
        return 2
    try:
        kwargs = _deployment_kwargs(args)
    except (ValueError, RlxError) as e:
        print(f"rlx serve: error: {e}", file=sys.stderr)
        return 2
    from . import app, local
    os.environ.update(local.LOOPBACK_ENV)  # before deployment() imports ray: Ray stays on loopback
    try:
        application = app.deployment(args.model, **kwargs)  # the model and settings checked before Ray starts
        local.start_local(port=args.port, num_cpus=args.cpus, num_gpus=args.gpus)
    except RlxError as e:
        print(f"rlx serve: {type(e).__name__}: {e}", file=sys.stderr)
        local.stop_local()
        return 2 if isinstance(e, (ServeConfigError, PolicyError, ParamError)) else 1
    from ray import serve
    try:
        serve.run(application, name=args.name, route_prefix=args.route_prefix)
    except Exception as e:  # noqa: BLE001 -- e.g. no replica could start: Serve's message says why
        print(f"rlx serve: the deployment did not start: {type(e).__name__}: {e}", file=sys.stderr)
        local.stop_local()
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    url = f"http://{local.LOOPBACK}:{args.port}{args.route_prefix}"
    print(f"serving {args.model} at {url} ({args.replicas} replica(s)); POST JSON {{\"inputs\": ...}}, .npz or .npy; "
          f"GET for the signature; Python: serve.get_app_handle({args.name!r}).predict.remote(inputs); "
          f"Ctrl-C stops", flush=True)
    while not stop.wait(0.5):
        pass
    print("rlx serve: stopping", flush=True)
    local.stop_local()
    return 0


def _deployment_kwargs(args) -> dict:
    from rlx_core.select import DevicePolicy
    from .model import Batching
    if args.no_batching:
        batching = False
    else:
        batching = Batching(args.max_batch_size, args.batch_wait_ms / 1e3) if (
            args.max_batch_size is not None or args.batch_wait_ms != 5.0) else None
    shapes = {}
    for item in args.shape:
        name, sep, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise ValueError(f"--shape {item!r}: expected NAME=D0,D1,...") from None
        if not sep or not name:
            raise ValueError(f"--shape {item!r}: expected NAME=D0,D1,...")
    policy = DevicePolicy.only(args.devices.split(",")) if args.devices else DevicePolicy.from_env()
    if args.weights is not None and not os.path.isfile(args.weights):
        raise ValueError(f"--weights {args.weights!r}: no such file")
    return {"weights": args.weights, "policy": policy, "replicas": args.replicas, "batching": batching,
            "input_shapes": shapes or None, "cpus_per_replica": args.cpus_per_replica,
            "gpus_per_replica": args.gpus_per_replica}

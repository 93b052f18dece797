"""A client of ``rlx serve``: JSON and ``.npz`` requests over HTTP, or the Python handle.

    python examples/serve_client.py --write-model /tmp/mlp.onnx         # rlx-serve's demo MLP
    rlx serve /tmp/mlp.onnx --replicas 2 --port 8000 &                   # Ctrl-C / kill %1 stops it
    python examples/serve_client.py --model /tmp/mlp.onnx --port 8000   # 10 requests, answers checked

    python examples/serve_client.py --model /tmp/mlp.onnx --handle      # no server: a local cluster in
                                                                         # this process, the Python handle

Every request goes to 127.0.0.1 only; the number of requests is bounded (``--requests``) and
each has a time limit. Answers are checked against the model computed with numpy.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
import urllib.error
import urllib.request

import numpy as np

TIMEOUT_S = 30.0


def post(port: int, body: bytes, content_type: str) -> tuple[dict, bytes]:
    """One POST to the server on 127.0.0.1; raises with the server's message on a 4xx/5xx."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            return dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        raise SystemExit(f"server answered {e.code}: {e.read().decode()}") from None


def over_http(port: int, requests: int, weights: dict) -> None:
    from rlx_serve.demo import mlp_numpy
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=TIMEOUT_S) as r:
        info = json.load(r)
    x_spec = info["signature"]["inputs"][0]
    batch = info["signature"]["batch"] or x_spec["dims"][0]
    print(f"signature: {info['signature']}")
    rng = np.random.default_rng(0)
    for i in range(requests):
        rows = 1 + i % batch if info["signature"]["batch"] else x_spec["dims"][0]
        x = rng.standard_normal((rows, *x_spec["dims"][1:])).astype(np.float32)
        t0 = time.perf_counter()
        if i % 2 == 0:  # JSON: nested lists
            _, body = post(port, json.dumps({"inputs": {"x": x.tolist()}}).encode(), "application/json")
            doc = json.loads(body)
            y, device, replica = np.array(doc["outputs"]["y"], np.float32), doc["device"], doc["replica"]
        else:  # numpy's own format: any size, any dtype
            buf = io.BytesIO()
            np.savez(buf, x=x)
            headers, body = post(port, buf.getvalue(), "application/x-npz")
            headers = {k.lower(): v for k, v in headers.items()}
            y, device, replica = np.load(io.BytesIO(body))["y"], headers["x-rlx-device"], headers["x-rlx-replica"]
        ms = (time.perf_counter() - t0) * 1e3
        ok = np.allclose(y, mlp_numpy(x, weights), rtol=1e-4, atol=1e-4)
        print(f"request {i}: {rows} row(s) -> {list(y.shape)} on {device} (replica {replica}) in {ms:.1f} ms, "
              f"{'matches numpy' if ok else 'DIFFERS from numpy'}")
        if not ok:
            raise SystemExit(1)


def over_handle(model: str, port: int, requests: int, weights: dict) -> None:
    import rlx_serve
    from rlx_core.select import DevicePolicy
    from rlx_serve.demo import mlp_numpy
    rlx_serve.start_local(port=port, num_cpus=2)  # Ray and Serve on 127.0.0.1
    from ray import serve
    try:
        handle = serve.run(rlx_serve.deployment(model, policy=DevicePolicy.only(["cpu"]), replicas=2),
                           name="rlx", route_prefix="/")
        xs = [np.random.default_rng(i).standard_normal((1 + i % 4, 16)).astype(np.float32) for i in range(requests)]
        pending = [handle.predict.remote({"x": x}) for x in xs]  # in flight together: batched by the replicas
        for i, (x, response) in enumerate(zip(xs, pending)):
            reply = response.result(timeout_s=TIMEOUT_S)
            ok = np.allclose(reply.outputs["y"], mlp_numpy(x, weights), rtol=1e-4, atol=1e-4)
            print(f"request {i}: on {reply.device} by replica {reply.replica} (pid {reply.pid}), "
                  f"{'matches numpy' if ok else 'DIFFERS from numpy'}")
        try:
            handle.predict.remote({"x": np.ones((1, 3), np.float32)}).result(timeout_s=TIMEOUT_S)
        except rlx_serve.BadRequestError as e:  # also an rlx_core InputError, wrapped by Ray: .cause is the error
            print(f"a bad request is refused: {getattr(e, 'cause', e)}")
    finally:
        rlx_serve.stop_local()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write-model", metavar="PATH.onnx", help="write the demo MLP there and exit")
    p.add_argument("--model", metavar="PATH.onnx", help="the served model (its weights check the answers)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--requests", type=int, default=10)
    p.add_argument("--handle", action="store_true", help="serve in this process and use the Python handle")
    args = p.parse_args()
    if args.write_model:
        from rlx_serve.demo import write_mlp_onnx
        write_mlp_onnx(args.write_model)
        print(f"wrote {args.write_model}: x [N, 16] -> y [N, 4]; now: rlx serve {args.write_model} --replicas 2")
        return
    if not args.model:
        p.error("--model is needed (the .onnx file the server serves), or --write-model")
    from rlx_serve.model import load_model
    weights = load_model(args.model).params
    if args.handle:
        over_handle(args.model, args.port, args.requests, weights)
    else:
        over_http(args.port, args.requests, weights)


if __name__ == "__main__":
    sys.exit(main())

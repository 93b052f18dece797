"""The demo MLP served by two CPU replicas on the local cluster: the network stays on
loopback, HTTP (JSON, .npz, .npy) and the Python handle answer what numpy computes, bad
requests get a 4xx with the RlxError's message, requests are batched, health checks run
the graph, and the metrics reach Ray's metrics agent."""
import io
import json
import os
import re
import time
import urllib.request

import numpy as np
import pytest

from rlx_core.errors import InputError
from rlx_core.select import DevicePolicy
from rlx_serve.demo import mlp_numpy

APP = "rlx"


@pytest.fixture(scope="module")
def app(cluster, mlp):
    from ray import serve
    import rlx_serve
    path, weights = mlp
    application = rlx_serve.deployment(path, policy=DevicePolicy.only(["cpu"]), replicas=2, health_check_period_s=1.0,
                                       options=rlx_serve.IngressOptions(max_body_bytes=1 << 20), name=APP)
    handle = serve.run(application, name=APP, route_prefix="/")
    yield type("App", (), {"handle": handle, "weights": weights, "port": cluster.port})
    serve.delete(APP)


def replica_stats(helpers, want: int = 2) -> dict:
    """``stats()`` of each model replica, by pid (asked until ``want`` replicas answered)."""
    from ray import serve
    handle = serve.get_deployment_handle(f"{APP}-model", app_name=APP)
    seen = {}

    def ask():
        s = handle.stats.remote().result(timeout_s=30)
        seen[s["pid"]] = s
        return len(seen) >= want
    helpers.until(ask, 30, f"stats from {want} replicas", interval_s=0.05)
    return seen


# --- network ------------------------------------------------------------------------------------
def _listening(pids: set[int]) -> list[str]:
    """``addr:port`` of every listening TCP socket the processes ``pids`` hold."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue  # the process ended
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    addr, port = fields[1].split(":")
                    found.append(f"{_ip(addr, width)}:{int(port, 16)}")
    return found


def _ip(hexaddr: str, width: int) -> str:
    raw = bytes.fromhex(hexaddr)
    if width == 8:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    data = b"".join(words)
    if data[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in data[12:])  # an IPv4-mapped address
    return ":".join(data[i:i + 2].hex() for i in range(0, 16, 2))


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc")
def test_every_ray_and_serve_socket_listens_on_loopback(app):
    addresses = _listening(_descendants(os.getpid()) | {os.getpid()})
    assert f"127.0.0.1:{app.port}" in addresses
    assert len(addresses) >= 5  # GCS, raylet, object manager, agents, workers, the HTTP proxy
    assert [a for a in addresses if not a.startswith("127.0.0.1:")] == []


# --- answers -------------------------------------------------------------------------------------
def test_http_json_and_numpy_payloads(app, helpers):
    x = helpers.rows_of(1, 3)
    want = mlp_numpy(x, app.weights)
    status, _, body = helpers.post(app.port, json.dumps({"inputs": {"x": x.tolist()}}).encode())
    doc = json.loads(body)
    assert status == 200 and doc["device"] == "cpu" and doc["fallback"] == [] and doc["retries"] == 0
    np.testing.assert_allclose(np.array(doc["outputs"]["y"], np.float32), want, rtol=1e-5, atol=1e-5)

    buf = io.BytesIO()
    np.savez(buf, x=x)
    status, headers, body = helpers.post(app.port, buf.getvalue(), "application/x-npz")
    headers = {k.lower(): v for k, v in headers.items()}
    assert status == 200 and headers["content-type"] == "application/x-npz" and headers["x-rlx-device"] == "cpu"
    np.testing.assert_allclose(np.load(io.BytesIO(body))["y"], want, rtol=1e-5, atol=1e-5)

    buf = io.BytesIO()
    np.save(buf, x[:1])
    status, headers, body = helpers.post(app.port, buf.getvalue(), "application/x-npy")
    assert status == 200
    np.testing.assert_allclose(np.load(io.BytesIO(body)), want[:1], rtol=1e-5, atol=1e-5)

    status, _, body = helpers.post(app.port, None, method="GET")
    assert status == 200 and json.loads(body)["signature"]["inputs"] == [{"name": "x", "dims": [8, 16],
                                                                          "dtype": "f32"}]


def test_python_handle(app, helpers):
    import rlx_serve
    x = helpers.rows_of(2, 5)
    reply = app.handle.predict.remote({"x": x}).result(timeout_s=30)
    assert isinstance(reply, rlx_serve.Prediction) and reply.device == "cpu" and reply.retries == 0
    np.testing.assert_allclose(reply.outputs["y"], mlp_numpy(x, app.weights), rtol=1e-5, atol=1e-5)
    assert app.handle.info.remote().result(timeout_s=30)["signature"]["batch"] == 8
    with pytest.raises(InputError, match=r"input 'x': expected dims \[r, 16\] with 1 <= r <= 8 rows, got \[9, 16\]"):
        app.handle.predict.remote({"x": helpers.rows_of(0, 9)}).result(timeout_s=30)


def test_bad_requests_get_4xx_with_the_message(app, helpers):
    big = b'{"inputs": {"x": [' + b"0," * (1 << 20) + b"0]}}"
    for body, media, method, path, status, message in [
        (b'{"inputs": {"x": [[1, 2]]}}', "application/json", "POST", "/", 400,
         r"input 'x': expected dims \[r, 16\] with 1 <= r <= 8 rows, got \[1, 2\]"),
        (b'{"inputs": {"z": [[1]]}}', "application/json", "POST", "/", 400, r"unknown: \['z'\]; missing: \['x'\]"),
        (b"{oops", "application/json", "POST", "/", 400, "the body is not JSON"),
        (b"1,2", "text/csv", "POST", "/", 415, "unsupported Content-Type"),
        (big, "application/json", "POST", "/", 413, "exceeds max_body_bytes=1048576"),
        (b"{}", "application/json", "PUT", "/", 405, "method PUT not allowed"),
        (b"{}", "application/json", "POST", "/nope", 404, "no such path '/nope'"),
    ]:
        got, _, answer = helpers.post(app.port, body, media, path=path, method=method)
        doc = json.loads(answer)
        assert got == status and re.search(message, doc["message"]), (got, doc)
    buf = io.BytesIO()
    np.savez(buf, x=np.ones((1, 16)))  # f64
    got, _, answer = helpers.post(app.port, buf.getvalue(), "application/x-npz")
    assert got == 400 and json.loads(answer) == {
        "error": "InputError", "message": "input 'x': expected dtype f32, got f64 (convert with .astype('float32'))"}


# --- batching, health, metrics -------------------------------------------------------------------
def test_requests_are_batched_and_both_replicas_serve(app, helpers):
    before = replica_stats(helpers)
    xs = [helpers.rows_of(100 + i, 1 + i % 3) for i in range(64)]
    responses = [app.handle.predict.remote({"x": x}) for x in xs]  # all in flight at once
    replies = [r.result(timeout_s=60) for r in responses]
    for x, reply in zip(xs, replies):
        np.testing.assert_allclose(reply.outputs["y"], mlp_numpy(x, app.weights), rtol=1e-5, atol=1e-5)
    after = replica_stats(helpers)
    requests = sum(after[p]["requests"] - before.get(p, {}).get("requests", 0) for p in after)
    runs = sum(after[p]["runs"] - before.get(p, {}).get("runs", 0) for p in after)
    assert requests == 64 and runs < 40  # 64 requests of 1-3 rows in runs of 8 rows (plus health checks)
    assert len({r.pid for r in replies}) == 2


def test_health_checks_run_the_graph(app, helpers):
    from ray import serve
    status = serve.status().applications[APP].deployments[f"{APP}-model"]
    assert status.status == "HEALTHY" and status.replica_states.get("RUNNING") == 2
    before = replica_stats(helpers)
    time.sleep(2.5)  # health_check_period_s=1: a few checks, no requests
    after = replica_stats(helpers)
    assert all(after[p]["runs"] > before[p]["runs"] and after[p]["requests"] == before[p]["requests"]
               for p in before)


def test_metrics_reach_rays_metrics_agent(app, helpers):
    import ray
    for i in range(4):
        app.handle.predict.remote({"x": helpers.rows_of(i, 2)}).result(timeout_s=30)
    port = ray.nodes()[0]["MetricsExportPort"]

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return text if "rlx_serve_request_latency_ms_bucket" in text and "rlx_serve_batch_rows" in text else None
    text = helpers.until(scrape, 30, "the rlx_serve metrics on Ray's Prometheus endpoint", interval_s=1.0)
    served = [line for line in text.splitlines() if line.startswith("ray_rlx_serve_requests")
              or line.startswith("rlx_serve_requests")]
    assert any('device="cpu"' in line and 'status="200"' in line and 'deployment="rlx-model"' in line
               for line in served), served

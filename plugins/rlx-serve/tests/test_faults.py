"""Faults on the local cluster: 1000 HTTP requests with one model replica killed (SIGKILL)
mid-run -- every accepted request is answered, right, and Ray brings the replica back --
and a device failing under a running replica, which hands its runs down the router's
fallback chain and says so."""
import concurrent.futures
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from rlx_core.select import DevicePolicy
from rlx_serve.demo import mlp_numpy

REQUESTS = 1000
CLIENTS = 8
KILL_AFTER = 300
DEADLINE_S = 150


def test_1000_requests_with_a_replica_killed_midway(cluster, mlp, helpers):
    from ray import serve
    import rlx_serve
    path, weights = mlp
    app = rlx_serve.deployment(path, policy=DevicePolicy.only(["cpu"]), replicas=2, access_log=False, name="load")
    serve.run(app, name="load", route_prefix="/load")
    try:
        answered = threading.Semaphore(0)
        killed: list[int] = []
        deadline = time.monotonic() + DEADLINE_S

        def one(i: int):
            x = helpers.rows_of(i, 1 + i % 8)
            if time.monotonic() > deadline:
                return i, None, "deadline passed"
            status, _, body = helpers.post(cluster.port, json.dumps({"inputs": {"x": x.tolist()}}).encode(),
                                           path="/load", timeout=60)
            answered.release()
            if status != 200:
                return i, None, f"status {status}: {body[:300]!r}"
            doc = json.loads(body)
            y = np.array(doc["outputs"]["y"], np.float32)
            ok = y.shape == (x.shape[0], 4) and np.allclose(y, mlp_numpy(x, weights), rtol=1e-5, atol=1e-5)
            return i, doc, None if ok else "wrong outputs"

        def killer(pids_seen):
            for _ in range(KILL_AFTER):
                answered.acquire(timeout=DEADLINE_S)
            victim = min(pids_seen)
            os.kill(victim, signal.SIGKILL)  # the replica dies with requests in flight
            killed.append(victim)

        pids_seen: set[int] = set()
        with concurrent.futures.ThreadPoolExecutor(CLIENTS + 1) as pool:
            warm = [pool.submit(one, i) for i in range(CLIENTS * 4)]  # both replicas answer before the kill
            results = [f.result() for f in warm]
            pids_seen.update(doc["pid"] for _, doc, err in results if doc)
            assert len(pids_seen) == 2, results[:3]
            kill = pool.submit(killer, pids_seen)
            results += list(pool.map(one, range(CLIENTS * 4, REQUESTS)))
            kill.result()
        failures = [(i, err) for i, _, err in results if err]
        assert failures == [] and len(results) == REQUESTS
        docs = [doc for _, doc, _ in results]
        after_kill = docs[KILL_AFTER + CLIENTS * 4:]
        assert killed[0] not in {d["pid"] for d in after_kill[-100:]}  # the dead replica answers no more
        print(f"retried requests: {sum(d['retries'] > 0 for d in docs)}, re-sends: {sum(d['retries'] for d in docs)}")

        def restarted():  # Ray replaces the dead replica: two running again, one of them new
            state = serve.status().applications["load"].deployments["load-model"]
            return state.replica_states.get("RUNNING") == 2
        helpers.until(restarted, 90, "Serve to replace the killed replica", interval_s=0.5)
        fresh = set()

        def new_pid_answers():
            status, _, body = helpers.post(cluster.port, json.dumps({"inputs": {"x": [[0.0] * 16]}}).encode(),
                                           path="/load")
            assert status == 200
            fresh.add(json.loads(body)["pid"])
            return fresh - pids_seen
        helpers.until(new_pid_answers, 30, "the new replica to answer", interval_s=0.05)
    finally:
        serve.delete("load")


@pytest.fixture(scope="module")
def flaky(cluster, mlp, tmp_path_factory):
    """The MLP on one replica whose first device is the flaky ``vulkan`` (conftest), then cpu."""
    from ray import serve
    import rlx_serve
    path, weights = mlp
    switches = tmp_path_factory.mktemp("flaky")
    env = {"PYTHONPATH": str(cluster.plugins), "RLX_PLUGINS": "cpu,flaky", "RLX_DEVICE_CHAIN": "vulkan,cpu",
           "RLX_FLAKY_DIR": str(switches)}
    app = rlx_serve.deployment(path, policy=DevicePolicy.only(["vulkan", "cpu"]), replicas=1, name="flaky",
                               actor_options={"runtime_env": {"env_vars": env}})
    handle = serve.run(app, name="flaky", route_prefix="/flaky")
    yield type("Flaky", (), {"handle": handle, "weights": weights, "fail": switches / "fail",
                             "slow": switches / "slow"})
    serve.delete("flaky")


def test_a_failing_device_falls_back_and_says_so(flaky, cluster, helpers):
    from ray import serve
    x = helpers.rows_of(7, 2)
    want = mlp_numpy(x, flaky.weights)
    reply = flaky.handle.predict.remote({"x": x}).result(timeout_s=30)
    assert reply.device == "vulkan" and reply.fallback == ()
    flaky.fail.write_text("")  # the device fails from now on
    try:
        reply = flaky.handle.predict.remote({"x": x}).result(timeout_s=30)
        assert reply.device == "cpu" and reply.fallback == (("vulkan", "RuntimeError: flaky vulkan: device lost"),)
        np.testing.assert_allclose(reply.outputs["y"], want, rtol=1e-5, atol=1e-5)
        status, headers, body = helpers.post(cluster.port, json.dumps({"inputs": {"x": x.tolist()}}).encode(),
                                             path="/flaky")
        doc = json.loads(body)
        assert status == 200 and doc["device"] == "cpu" and doc["fallback"][0][0] == "vulkan"
        stats = serve.get_deployment_handle("flaky-model", app_name="flaky").stats.remote().result(timeout_s=30)
        assert {"failed": "vulkan", "device": "cpu"}.items() <= stats["fallbacks"][0].items()
        assert serve.status().applications["flaky"].deployments["flaky-model"].status == "HEALTHY"
    finally:
        flaky.fail.unlink()  # the device is back: first in the chain again
    assert flaky.handle.predict.remote({"x": x}).result(timeout_s=30).device == "vulkan"


def test_requests_in_flight_on_the_only_replica_survive_its_death(flaky, helpers):
    """No other replica to turn to: the ingress re-sends until Ray has started a new one."""
    from ray import serve
    before = flaky.handle.predict.remote({"x": helpers.rows_of(0, 1)}).result(timeout_s=30).pid
    flaky.slow.write_text("")  # each run takes a second: the requests below are in the replica when it dies
    try:
        xs = [helpers.rows_of(10 + i, 1 + i) for i in range(3)]
        pending = [flaky.handle.predict.remote({"x": x}) for x in xs]
        time.sleep(0.5)
        os.kill(before, signal.SIGKILL)
    finally:
        flaky.slow.unlink()
    replies = [r.result(timeout_s=90) for r in pending]
    for x, reply in zip(xs, replies):
        np.testing.assert_allclose(reply.outputs["y"], mlp_numpy(x, flaky.weights), rtol=1e-5, atol=1e-5)
        assert reply.pid != before and reply.retries >= 1
    assert serve.status().applications["flaky"].deployments["flaky-model"].replica_states.get("RUNNING") == 1

"""rlx-serve's tests. The ones using the ``cluster`` fixture share one local Ray cluster per
test process (``ray.init(num_cpus=2)`` through ``rlx_serve.start_local``: loopback only),
started on first use; they skip only where Ray is not installed.

The replicas see only the CPU plugin (``RLX_PLUGINS=cpu`` in the job's environment), so
they start fast and the same everywhere. ``FLAKY_PLUGIN`` is an installed-looking plugin
serving ``vulkan`` with the reference interpreter, which fails ("device lost") while a file
``fail`` exists in the folder ``RLX_FLAKY_DIR`` (a device failing under a running replica)
and takes a second per run while a file ``slow`` does (requests caught in flight).
"""
import importlib.util
import socket
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest

from rlx_core.runtime import PLUGIN_API_VERSION
from rlx_core.testing.fake_plugins import REFERENCE_EXE, make_dist

NO_RAY = "ray[serve] is not installed: pip install 'rlx-core[serve]'"

FLAKY_PLUGIN = '''
import os
import time
from rlx_core.ir import all_schemas
from rlx_core.reference import evaluate, has_kernel
from rlx_core.runtime import Availability, Backend, BackendFactory, Device, ExecutableGraph, hookimpl

RLX_PLUGIN_API = {api}
''' + REFERENCE_EXE + '''
class FlakyExe(Exe):
    def run(self, inputs, out=None):
        if os.path.exists(os.environ["RLX_FLAKY_DIR"] + "/fail"):
            raise RuntimeError("flaky vulkan: device lost")
        if os.path.exists(os.environ["RLX_FLAKY_DIR"] + "/slow"):
            time.sleep(1.0)
        return super().run(inputs, out)

class FlakyBackend(Backend):
    name = "flaky"
    device = Device("vulkan")
    def is_available(self):
        return Availability(True, "a test device that fails on demand")
    def supported_ops(self):
        return {{k: None for k in all_schemas() if has_kernel(k)}}
    def compile(self, graph, options):
        return FlakyExe(graph, options)

@hookimpl
def rlx_backends():
    return [BackendFactory("flaky", "vulkan", FlakyBackend, priority=10)]
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlp(tmp_path_factory):
    """The demo MLP as an ONNX file and its weights."""
    pytest.importorskip("onnx")
    from rlx_serve.demo import write_mlp_onnx
    path = tmp_path_factory.mktemp("model") / "mlp.onnx"
    return path, write_mlp_onnx(path)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Ray (2 CPUs) and Serve on 127.0.0.1; ``cluster.port`` is Serve's HTTP port."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip(NO_RAY)
    from rlx_serve.local import start_local, stop_local
    root = tmp_path_factory.mktemp("ray")
    make_dist(root / "plugins", "rlx-flaky", FLAKY_PLUGIN.format(api=PLUGIN_API_VERSION), ep_name="flaky")
    port = free_port()
    start_local(port=port, num_cpus=2, object_store_memory=256 << 20,
                runtime_env={"env_vars": {"RLX_PLUGINS": "cpu", "XDG_CACHE_HOME": str(root / "cache")}},
                _system_config={"metrics_report_interval_ms": 1000})
    yield type("Cluster", (), {"port": port, "plugins": root / "plugins", "root": root})
    stop_local()


@pytest.fixture(scope="session")
def helpers():
    """This module's helpers, for test files (``--import-mode=importlib`` cannot import conftest)."""
    return SimpleNamespace(free_port=free_port, until=until, rows_of=rows_of, post=post)


def until(predicate, timeout_s: float, what: str, interval_s: float = 0.2):
    """Poll ``predicate`` until it returns something truthy (returned), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def rows_of(seed: int, rows: int, features: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32)


def post(port: int, body: bytes, content_type: str = "application/json", path: str = "/", method: str = "POST",
         timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """``(status, headers, body)`` of one request to Serve on 127.0.0.1."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method,
                                 headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()

"""Fake devices for the selection tests, registered next to the real CPU plugin.

* ``gpu``  (backend ``fake-gpu``): runs the reference interpreter; optional delay per run.
* ``cuda`` (``fake-cuda``): its probe fails ("no NVIDIA driver").
* ``rocm`` (``fake-rocm``): compiles, then raises at run time ("device lost").
* ``metal`` (``fake-metal``): runs only ``add`` and ``mul``.

Each test gets a fresh registry holding the CPU plugin and these fakes only, an empty
calibration cache directory and no policy variables from the outer environment.
"""
import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

from rlx_core import Graph, Shape
from rlx_core.reference import evaluate, has_kernel
from rlx_core.ir import all_schemas
from rlx_core.runtime import Availability, Backend, BackendFactory, ExecutableGraph, hookimpl
from rlx_core.runtime.registry import register_backends, reset_registry
from rlx_core.select.calibration import FORMAT_VERSION, _fingerprint, calibration_path, clear_memo

POLICY_VARS = ("DEVICES", "DENY_DEVICES", "PREFER_DEVICES", "DEVICE", "DEVICE_CHAIN", "BENCHMARK_PICK",
               "FORCE_DEVICE")


class RefExecutable(ExecutableGraph):
    capabilities = frozenset({"clone"})

    def __init__(self, backend, graph):
        self.backend, self.graph, self.params = backend, graph, {}
        self.runs = 0

    def set_param(self, name, value):
        self.params[name] = np.array(value, copy=True)

    def run(self, inputs, out=None):
        """Like a device with one staging buffer: inputs are copied in, then (after the
        configured delay) read back, so unserialized concurrent runs would mix them up."""
        self.runs += 1
        if self.backend.fail_at_run:
            raise RuntimeError(f"{self.backend.name}: device lost")
        self.staging = {k: np.array(v, copy=True) for k, v in inputs.items()}
        if self.backend.delay_s:
            time.sleep(self.backend.delay_s)
        return evaluate(self.graph, self.staging, self.params)


class RefBackend(Backend):
    def __init__(self, name, device, ok=True, reason="", kinds=None, fail_at_run=False, delay_s=0.0,
                 caps=frozenset({"clone", "typed_io"})):
        self.name, self.device = name, device
        self.ok, self.reason, self.kinds = ok, reason, kinds
        self.fail_at_run, self.delay_s, self.caps = fail_at_run, delay_s, caps
        self.compiles = 0

    def is_available(self):
        return Availability(self.ok, self.reason or ("fake device" if self.ok else "probe failed"))

    def supported_ops(self):
        kinds = self.kinds if self.kinds is not None else [k for k in all_schemas() if has_kernel(k)]
        return {k: None for k in kinds}

    def advisory_capabilities(self):
        return self.caps

    def compile(self, graph, options):
        self.compiles += 1
        return RefExecutable(self, graph)


class FakePlugin:
    """A hand-registered plugin serving the given backends."""

    def __init__(self, *backends):
        self.backends = backends

    @hookimpl
    def rlx_backends(self):
        return [BackendFactory(name=b.name, device=b.device, create=lambda b=b: b, priority=10,
                               probe=lambda b=b: Availability(b.ok, b.reason)) for b in self.backends]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No outer RLX_* policy variables; of the installed plugins only the CPU one (the fakes
    stand in for the rest, whatever this machine has installed); calibration cache in a
    temporary directory."""
    for suffix in POLICY_VARS:
        monkeypatch.delenv(f"RLX_{suffix}", raising=False)
    monkeypatch.setenv("RLX_PLUGINS", "cpu")
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    reset_registry()
    clear_memo()
    yield
    reset_registry()
    clear_memo()


@pytest.fixture
def fakes():
    """Register the four fake devices; returns their backends by device label."""
    backends = SimpleNamespace(
        gpu=RefBackend("fake-gpu", "gpu"),
        cuda=RefBackend("fake-cuda", "cuda", ok=False, reason="no NVIDIA driver"),
        rocm=RefBackend("fake-rocm", "rocm", fail_at_run=True),
        metal=RefBackend("fake-metal", "metal", kinds=["add", "mul"]))
    register_backends(FakePlugin(*vars(backends).values()))
    return backends


def write_calibration(device, backend, sgemm=100.0, bw=10.0, roundtrip=5000.0, dispatch=5000.0, vector=10.0,
                      transfer=None, kinds=None):
    """Put a valid calibration file for ``backend`` on ``device`` into the cache."""
    fp = _fingerprint()
    path = calibration_path(backend, device, fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"backend": backend, "device": device, "device_id": f"{device}-{fp}", "fingerprint": fp,
            "sgemm_gflops": sgemm, "memory_bw_gbps": bw, "roundtrip_overhead_ns": roundtrip,
            "dispatch_overhead_ns": dispatch, "vector_gflops": vector, "transfer_bw_gbps": transfer,
            "kind_ns_per_element": kinds or {}, "plugin_version": None, "measured_s": 0.1, "created": 0.0,
            "format": FORMAT_VERSION}
    if backend == "cpu":
        from rlx_core.runtime.registry import registry
        data["plugin_version"] = next(p.version for p in registry().plugins if p.name == "cpu")
    path.write_text(json.dumps(data))
    return path


def tanh_graph(n=4):
    """y = tanh(x * w) + 1 with a param, so params and inputs both matter."""
    g = Graph("tanh-block")
    x = g.input("x", Shape((n,), "f32"))
    w = g.param("w", Shape((n,), "f32"))
    g.set_outputs([g.tanh(x * w) + 1.0])
    return g


def add_graph(n=4):
    g = Graph("add-only")
    x = g.input("x", Shape((n,), "f32"))
    w = g.param("w", Shape((n,), "f32"))
    g.set_outputs([x + w])
    return g


def expected_tanh(x, w):
    return np.tanh(x * w) + np.float32(1.0)


@pytest.fixture
def helpers():
    """The module's helpers, for test files (``--import-mode=importlib`` cannot import conftest)."""
    return SimpleNamespace(write_calibration=write_calibration, tanh_graph=tanh_graph, add_graph=add_graph,
                           expected_tanh=expected_tanh, RefBackend=RefBackend, FakePlugin=FakePlugin)

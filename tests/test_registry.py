"""Plugin discovery through entry points, failure isolation and selection between plugins.

Plugin distributions are created on disk in a temporary directory (a package plus a
``*.dist-info`` with ``entry_points.txt``, exactly what pip installs) and discovered in a
fresh Python process with that directory on ``sys.path`` -- no change to the core.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rlx_core
from rlx_core import Session
from rlx_core.errors import DeviceUnavailableError, PolicyError
from rlx_core.runtime import (Availability, Backend, BackendFactory, Device, hookimpl, register_backends,
                              register_device)
from rlx_core.testing.fake_plugins import REFERENCE_EXE, make_dist

# A complete third-party plugin: a backend for a device of its own that runs graphs with
# the reference interpreter (standing in for real kernels) through the public API only.
FAKE_BACKEND = '''
import numpy as np
from rlx_core.reference import evaluate
from rlx_core.ir import all_schemas
from rlx_core.runtime import (Availability, Backend, BackendFactory, Device, ExecutableGraph, hookimpl,
                              register_device)

register_device("{device}", "a test accelerator")

''' + REFERENCE_EXE + '''
class FakeBackend(Backend):
    name = "{name}"
    device = Device("{device}")
    def is_available(self):
        return Availability(True, "fake {name}")
    def supported_ops(self):
        return {{k: None for k in all_schemas() if k in {ops}}}
    def compile(self, graph, options):
        return Exe(graph, options)

@hookimpl
def rlx_backends():
    return [BackendFactory("{name}", "{device}", FakeBackend, priority={priority})]
'''


def run_child(root, code, **env):
    """Run ``code`` in a fresh interpreter with ``root`` on sys.path; returns parsed JSON."""
    full_env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **env}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env=full_env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


REPORT = """
import json, numpy as np, rlx_core
from rlx_core.runtime.registry import registry, iter_entries
reg = registry()
res = {"plugins": {p.name: [p.status, p.error, p.distribution, p.version] for p in reg.plugins},
       "devices": [str(d) for d in reg.devices()],
       "chosen": {d.label: reg.entry(d).name for d in reg.devices()}}
"""


def test_temp_plugin_is_discovered_and_runs_a_graph(tmp_path):
    make_dist(tmp_path, "rlx-fakegpu", FAKE_BACKEND.format(name="fakegpu", device="testdev", ops='{"add","exp"}',
                                                           priority=0), version="1.2.3")
    res = run_child(tmp_path, REPORT + """
g = rlx_core.Graph("t"); x = g.input("x", (3,)); g.set_outputs([g.exp(x + x)])
c = rlx_core.Session("testdev").compile(g)
res["out"] = c.run({"x": np.arange(3, dtype=np.float32)})[0].tolist()
res["backend"] = c.backend
print(json.dumps(res))
""")
    assert res["plugins"]["rlx-fakegpu"][:1] == ["loaded"]
    assert res["plugins"]["rlx-fakegpu"][2:] == ["rlx-fakegpu", "1.2.3"]
    assert "testdev" in res["devices"] and "cpu" in res["devices"]
    assert res["backend"] == "fakegpu"
    np.testing.assert_allclose(res["out"], np.exp(2 * np.arange(3)), rtol=1e-6)


def test_plugin_that_raises_at_import_is_reported_and_the_rest_works(tmp_path):
    make_dist(tmp_path, "rlx-broken", "raise RuntimeError('driver exploded')\n")
    res = run_child(tmp_path, REPORT + """
g = rlx_core.Graph("t"); x = g.input("x", (2,)); g.set_outputs([g.neg(x)])
res["out"] = rlx_core.Session("cpu").compile(g).run({"x": np.ones(2, np.float32)})[0].tolist()
print(json.dumps(res))
""")
    status, error = res["plugins"]["rlx-broken"][:2]
    assert status == "failed" and "driver exploded" in error
    assert res["out"] == [-1.0, -1.0]


def test_plugin_whose_hook_returns_garbage_is_reported(tmp_path):
    make_dist(tmp_path, "rlx-garbage",
              "from rlx_core.runtime import hookimpl\n@hookimpl\ndef rlx_backends():\n    return ['nope']\n")
    res = run_child(tmp_path, REPORT + "print(json.dumps(res))")
    assert res["plugins"]["rlx-garbage"][0] == "failed"
    assert "not BackendFactory" in res["plugins"]["rlx-garbage"][1]


def test_two_plugins_for_one_device_resolve_by_priority_then_env(tmp_path):
    for name, prio in (("alpha", 1), ("beta", 5)):
        make_dist(tmp_path, f"rlx-{name}", FAKE_BACKEND.format(name=name, device="testdev", ops='{"neg"}',
                                                               priority=prio))
    assert run_child(tmp_path, REPORT + "print(json.dumps(res))")["chosen"]["testdev"] == "beta"
    forced = run_child(tmp_path, REPORT + "print(json.dumps(res))", RLX_BACKEND_TESTDEV="alpha")
    assert forced["chosen"]["testdev"] == "alpha"


def test_plugin_selection_env_controls(tmp_path):
    make_dist(tmp_path, "rlx-fakegpu", FAKE_BACKEND.format(name="fakegpu", device="testdev", ops='{"neg"}',
                                                           priority=0))
    only_cpu = run_child(tmp_path, REPORT + "print(json.dumps(res))", RLX_PLUGINS="cpu")
    assert only_cpu["plugins"]["rlx-fakegpu"][0] == "disabled"
    assert only_cpu["devices"] == ["cpu"]
    none = run_child(tmp_path, REPORT + "print(json.dumps(res))", RLX_DISABLE_PLUGIN_AUTOLOAD="1")
    assert none["devices"] == [] and none["plugins"] == {}


TESTDEV = register_device("testdev", "a test accelerator")


class _RaisingBackend(Backend):
    name, device = "boom", TESTDEV

    def __init__(self):
        raise RuntimeError("no device handle")

    def is_available(self):  # pragma: no cover - never constructed
        return Availability(True)

    def supported_ops(self):  # pragma: no cover
        return {}

    def compile(self, graph, options):  # pragma: no cover
        raise AssertionError


class _ByHand:
    @hookimpl
    def rlx_backends(self):
        return [BackendFactory("boom", "testdev", _RaisingBackend)]


def test_backend_whose_create_raises_is_unavailable_with_reason(fresh_registry):
    register_backends(_ByHand())
    assert not TESTDEV.is_available()
    with pytest.raises(DeviceUnavailableError, match="no device handle"):
        Session("testdev")
    assert Device.CPU.is_available()


def test_unknown_and_unserved_devices_raise_clear_errors(fresh_registry, monkeypatch):
    monkeypatch.setenv("RLX_PLUGINS", "cpu")  # 'tpu' stays unserved where rlx-tpu is installed
    with pytest.raises(rlx_core.UnknownDeviceError, match="did you mean 'cuda'"):
        Session("cdua")
    with pytest.raises(DeviceUnavailableError, match="no installed plugin serves device 'tpu'"):
        Session("tpu")


def test_bad_backend_override_names_the_variable(fresh_registry, monkeypatch):
    monkeypatch.setenv("RLX_BACKEND_CPU", "nonexistent")
    with pytest.raises(PolicyError, match="RLX_BACKEND_CPU"):
        Session("cpu")


def test_registry_load_is_lazy(tmp_path):
    """Discovery imports plugin modules but no backend library (numba stays unloaded)."""
    res = run_child(tmp_path, """
import json, sys
import rlx_core
from rlx_core.runtime.registry import registry
registry().entry("cpu").availability(full=False)
print(json.dumps({"numba": "numba" in sys.modules}))
""")
    assert res["numba"] is False


def test_a_device_equals_its_label_string_and_hashes_like_it():
    """``Device.CPU == "cpu"`` (the canonical label, index included); aliases parse but are
    not equal, so equality with strings agrees with their hashes."""
    from rlx_core.runtime.device import parse_device
    assert Device.CPU == "cpu" and "cpu" == Device.CPU and Device("cuda", 1) == "cuda:1"
    assert Device("cuda", 1) != Device.CUDA and Device.CUDA != "cuda:1" and Device.CUDA != "nvidia"
    assert parse_device("nvidia") == Device.CUDA == "cuda"
    assert "cpu" in {Device.CPU} and Device.CPU in {"cpu": 1} and hash(Device("cuda", 1)) == hash("cuda:1")
    assert Device.CPU != 0 and sorted([Device.CUDA, Device.CPU]) == [Device.CPU, Device.CUDA]
    assert [Device.METAL, Device.ANE, Device.GPU] == ["metal", "ane", "gpu"]

"""The plugin contract as the registry enforces it (issue 13):

* a device a plugin declares at import parses before anything has loaded the plugins
  (``Session("npu")``, ``RLX_DEVICES=npu``, the conformance suite);
* ``rlx devices`` never says "available yes" for a backend whose ``is_available()`` fails;
* a malformed ``supported_ops()`` fails the backend when it is created, with the reason;
* ``RLX_PLUGINS`` accepts entry-point, distribution and device names, and values of it or
  of ``RLX_BACKEND_<LABEL>`` that match nothing are warned about;
* the plugin API version is checked at load;
* install hints are exact and come from one function.

Installed-looking plugin distributions are written to a temporary directory and found
through entry points in a fresh interpreter (as in test_registry.py).
"""
import ast
import json
import logging
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from rlx_core import Session
from rlx_core.cli import main
from rlx_core.errors import DeviceUnavailableError, PluginError, PolicyError
from rlx_core.ir import DType
from rlx_core.runtime import (PLUGIN_API_VERSION, Availability, Backend, BackendFactory, hookimpl, register_backends,
                              register_device)
from rlx_core.runtime.backend import check_supported_ops
from rlx_core.runtime.registry import PluginRecord, Registry, _plugin_matches, install_hint, registry
from rlx_core.testing.fake_plugins import REFERENCE_EXE, make_dist

ROOT = pathlib.Path(__file__).resolve().parents[1]

# A plugin for a device of its own, declared at import; runs graphs with the reference.
NPU_PLUGIN = '''
from rlx_core.reference import evaluate
from rlx_core.runtime import Availability, Backend, BackendFactory, Device, ExecutableGraph, hookimpl, register_device

RLX_PLUGIN_API = {api}
register_device("npu", "a test neural processing unit", aliases=("acme",))

''' + REFERENCE_EXE + '''
class NpuBackend(Backend):
    name = "npu"
    device = Device("npu")
    def is_available(self):
        return Availability({available}, "npu board {available}")
    def supported_ops(self):
        return {ops}
    def compile(self, graph, options):
        return Exe(graph, options)

@hookimpl
def rlx_backends():
    return [BackendFactory("npu", "npu", NpuBackend)]
'''


def npu_plugin(api=PLUGIN_API_VERSION, available=True, ops='{"add": None, "neg": None}'):
    return NPU_PLUGIN.format(api=api, available=available, ops=ops)


def child(root, code, *, check=True, timeout=120, **env):
    """Run ``code`` in a fresh interpreter with ``root`` on sys.path (only the CPU plugin of
    whatever this machine has installed, plus the fakes); returns the completed process."""
    full_env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                "XDG_CACHE_HOME": str(root / "cache"), **env}
    for var in [v for v in full_env if v.startswith(("RLX_BACKEND_", "RLX_DEVICE"))] + ["RLX_DISABLE_PLUGIN_AUTOLOAD"]:
        if var not in env:
            full_env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         env=full_env, timeout=timeout, cwd=root)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def last_json(proc):
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- 1. a device declared by a plugin parses before the plugins are loaded ----------------------
def test_plugin_device_works_from_session_before_anything_loaded_the_plugins(tmp_path):
    make_dist(tmp_path, "rlx-npu", npu_plugin(), ep_name="npu")
    res = last_json(child(tmp_path, """
        import json, sys, numpy as np
        from rlx_core import Graph, Session
        assert sys.modules["rlx_core.runtime.registry"]._REGISTRY is None, "something loaded the plugins already"
        s = Session("npu")                              # the first thing that touches devices
        g = Graph("t"); x = g.input("x", (3,)); g.set_outputs([g.neg(x + x)])
        out = s.compile(g).run({"x": np.arange(3, dtype=np.float32)})[0]
        print(json.dumps({"backend": s.backend.name, "out": out.tolist(), "alias": str(Session("acme").device)}))
        """, RLX_PLUGINS="cpu,npu"))
    assert res == {"backend": "npu", "out": [-0.0, -2.0, -4.0], "alias": "npu"}


def test_plugin_device_works_from_the_policy_variables(tmp_path):
    make_dist(tmp_path, "rlx-npu", npu_plugin(), ep_name="npu")
    res = last_json(child(tmp_path, """
        import json
        from rlx_core import Graph
        from rlx_core.select import DevicePolicy, fastest_device_for
        policy = DevicePolicy.from_env()
        g = Graph("t"); x = g.input("x", (3,)); g.set_outputs([g.neg(x)])
        print(json.dumps({"policy": policy.describe(), "pick": str(fastest_device_for(g, policy, calibrate=False))}))
        """, RLX_PLUGINS="cpu,npu", RLX_DEVICES="npu"))
    assert "npu" in res["policy"] and res["pick"] == "npu"


def test_plugin_device_works_in_the_conformance_suite(tmp_path):
    make_dist(tmp_path, "rlx-npu", npu_plugin(), ep_name="npu")
    (tmp_path / "test_npu.py").write_text(
        "from rlx_core.testing import ConformanceSuite\n\nclass TestNpu(ConformanceSuite):\n    device = 'npu'\n")
    proc = child(tmp_path, """
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "test_npu.py", "--rlx-kinds", "add", "-k", "test_case"]))
        """, check=False, timeout=300, RLX_PLUGINS="cpu,npu")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "UnknownDeviceError" not in proc.stdout and re.search(r"\d+ passed", proc.stdout)


def test_unknown_device_inside_plugin_loading_fails_that_plugin_without_recursion(tmp_path):
    """A plugin that names a device nobody declared (or calls registry() at import) is
    recorded as failed; neither recurses nor deadlocks."""
    make_dist(tmp_path, "rlx-ghost", "from rlx_core.runtime import parse_device\nparse_device('ghostdev')\n")
    make_dist(tmp_path, "rlx-eager", "from rlx_core.runtime import registry\nregistry()\n")
    res = last_json(child(tmp_path, """
        import json
        from rlx_core.errors import UnknownDeviceError
        from rlx_core.runtime.registry import registry
        try:
            from rlx_core import Session
            Session("ghostdev")
            err = ""
        except UnknownDeviceError as e:
            err = str(e)
        recs = {p.name: [p.status, p.error] for p in registry().plugins}
        print(json.dumps({"recs": recs, "err": err}))
        """, timeout=60, RLX_PLUGINS="rlx-ghost,rlx-eager,cpu"))
    assert res["recs"]["rlx-ghost"][0] == "failed" and "unknown device 'ghostdev'" in res["recs"]["rlx-ghost"][1]
    assert res["recs"]["rlx-eager"][0] == "failed" and "while the plugins are being loaded" in res["recs"]["rlx-eager"][1]
    # the error for the user names the plugins that did not load (the device may be theirs)
    assert "unknown device 'ghostdev'" in res["err"] and "plugins not loaded: " in res["err"]
    assert "rlx-ghost (rlx-ghost 0.3.0) failed: UnknownDeviceError" in res["err"]


# --- 2. rlx devices: "available yes" only where is_available() passed -----------------------------
class _Unplugged(Backend):
    name, device = "npu-unplugged", register_device("testnpu", "a test neural processing unit")

    def is_available(self):
        return Availability(False, "no npu board on the bus")

    def supported_ops(self):
        return {"add": None}

    def compile(self, graph, options):  # pragma: no cover - never available
        raise AssertionError


class _UnpluggedPlugin:
    @hookimpl
    def rlx_backends(self):  # no cheap probe of its own: the cheap probe passes
        return [BackendFactory("npu-unplugged", "testnpu", _Unplugged)]


@pytest.fixture
def cpu_only(monkeypatch, tmp_path):
    for var in [v for v in os.environ if v.startswith(("RLX_BACKEND_", "RLX_DEVICE", "RLX_DENY", "RLX_PREFER"))]:
        monkeypatch.delenv(var)
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.setenv("RLX_PLUGINS", "cpu")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from rlx_core.runtime.registry import reset_registry
    reset_registry()
    yield
    reset_registry()


def devices_out(capsys, *argv):
    code = main(["devices", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def row(out, label):
    return next(line for line in out.splitlines() if line.startswith(f"{label} "))


def test_rlx_devices_does_not_say_yes_for_a_backend_whose_full_probe_fails(cpu_only, capsys):
    register_backends(_UnpluggedPlugin())
    code, out, _ = devices_out(capsys)
    assert code == 0
    assert " no " in row(out, "testnpu") and " yes " not in row(out, "testnpu")
    assert "testnpu: not available: no npu board on the bus" in out
    assert " yes " in row(out, "cpu")
    code, out, _ = devices_out(capsys, "--probe", "cheap")  # the cheap probe cannot tell: "maybe", explained
    assert " maybe " in row(out, "testnpu") and " yes " not in row(out, "testnpu")
    assert "only the cheap probe ran" in out
    code, out, _ = devices_out(capsys, "--json", "--probe", "cheap")
    npu = next(r for r in json.loads(out)["report"] if r["device"] == "testnpu")
    assert npu["available"] is None
    code, out, _ = devices_out(capsys, "--json")
    npu = next(r for r in json.loads(out)["report"] if r["device"] == "testnpu")
    assert npu["available"] is False


# --- 3. supported_ops is checked when the backend is created --------------------------------------
def _ops_backend(table):
    class Bad(Backend):
        name, device = "npu-bad", register_device("testnpu", "a test neural processing unit")

        def is_available(self):
            return Availability(True, "fine")

        def supported_ops(self):
            return table

        def compile(self, graph, options):  # pragma: no cover
            raise AssertionError
    return Bad


@pytest.mark.parametrize("table, expected", [
    ({"add": {"f32", "f16"}}, r"backend 'npu-bad' .*op kind 'add': expected None or a set of rlx_core\.DType, "
                              r"got set holding str '.*DType\.F"),
    ({"add": "f32"}, r"op kind 'add': expected None or a set of rlx_core\.DType, got str 'f32' \(wrap it: "
                     r"frozenset\(\{DType\.F32\}\)\)"),
    ({"add": DType.F32}, r"op kind 'add': .*got DType"),
    ({"addd": None}, r"key 'addd' is not an op kind \(did you mean 'add'\?\)"),
    ({3: None}, r"key 3 is a int"),
    (["add", "neg"], r"must return a mapping of op kind -> None or a set of rlx_core\.DType, got list"),
])
def test_malformed_supported_ops_is_rejected_naming_backend_kind_expected_and_given(table, expected):
    with pytest.raises(PluginError, match=expected):
        check_supported_ops(_ops_backend(table)())


def test_good_supported_ops_tables_pass():
    for table in ({"add": None}, {"add": frozenset({DType.F32}), "neg": {DType.F16, DType.F32}},
                  {"add": (DType.F32,)}, {}):
        check_supported_ops(_ops_backend(table)())


def test_malformed_supported_ops_fails_the_backend_at_creation_and_shows_in_rlx_devices(cpu_only, capsys):
    class Plugin:
        @hookimpl
        def rlx_backends(self):
            return [BackendFactory("npu-bad", "testnpu", _ops_backend({"add": {"f32"}}))]
    register_backends(Plugin())
    entry = registry().entry("testnpu")
    with pytest.raises(PluginError, match="op kind 'add': expected None or a set of rlx_core.DType, got set "
                                          "holding str 'f32' \\(use DType.F32\\)"):
        entry.get()
    assert "supported_ops() is malformed" in entry.error
    with pytest.raises(DeviceUnavailableError, match="supported_ops\\(\\) is malformed"):
        Session("testnpu")
    code, out, _ = devices_out(capsys)
    assert " no " in row(out, "testnpu") and "testnpu: not available: plugin error: PluginError: backend 'npu-bad'" in out


# --- 4. RLX_PLUGINS and RLX_BACKEND_<LABEL> -------------------------------------------------------
@pytest.mark.parametrize("item, name, dist, selected", [
    ("cpu", "cpu", "rlx-cpu", True),
    ("rlx-cpu", "cpu", "rlx-cpu", True),
    ("RLX_CPU", "cpu", "rlx-cpu", True),  # distribution names are compared normalized
    ("host", "cpu", "rlx-cpu", True),     # a device alias
    ("nvidia", "cuda", "rlx-cuda", True),
    ("cuda", "cuda", "rlx-cuda", True),
    ("gpu", "wgpu", "rlx-wgpu", True),    # the plugin published for the device
    ("vulkan", "wgpu", "rlx-wgpu", True),
    ("wgpu", "wgpu", "rlx-wgpu", True),
    ("tpu", "wgpu", "rlx-wgpu", False),
    ("cuda", "cpu", "rlx-cpu", False),
    ("npu", "npu", "rlx-acme", True),     # named after the device (a third-party one)
])
def test_rlx_plugins_items(item, name, dist, selected):
    assert _plugin_matches(PluginRecord(name, "entry point x", distribution=dist), item) is selected


def test_rlx_plugins_by_distribution_name_and_unmatched_items_warn(tmp_path):
    make_dist(tmp_path, "rlx-acme-npu", npu_plugin(), ep_name="acme")
    proc = child(tmp_path, """
        import json
        from rlx_core.runtime.registry import registry
        reg = registry()
        print(json.dumps({"plugins": {p.name: p.status for p in reg.plugins}, "warnings": reg.env_warnings(),
                          "devices": [str(d) for d in reg.devices()]}))
        """, RLX_PLUGINS="rlx_acme_npu, cpu, rlx-nosuch")
    res = last_json(proc)
    assert res["plugins"]["acme"] == "loaded" and res["devices"] == ["cpu", "npu"]
    assert [w for w in res["warnings"] if "'rlx-nosuch' matches no installed plugin" in w]
    assert "'rlx-nosuch' matches no installed plugin" in proc.stderr  # logged as a warning


def test_unmatched_rlx_plugins_item_is_listed_by_rlx_devices(cpu_only, capsys, monkeypatch, caplog):
    monkeypatch.setenv("RLX_PLUGINS", "cpu,nvidai")
    with caplog.at_level(logging.WARNING, logger="rlx.registry"):
        code, out, _ = devices_out(capsys)
    assert code == 0
    assert "warnings (RLX_* plugin variables):" in out and "RLX_PLUGINS: 'nvidai' matches no installed plugin" in out
    assert "'nvidai' matches no installed plugin" in caplog.text


def test_unmatched_backend_overrides_warn(cpu_only, capsys, monkeypatch, caplog):
    monkeypatch.setenv("RLX_BACKEND_NOSUCHDEV", "x")
    monkeypatch.setenv("RLX_BACKEND_HOST", "cpu")       # an alias: the variable takes the label
    with caplog.at_level(logging.WARNING, logger="rlx.registry"):
        code, out, _ = devices_out(capsys)
    assert code == 0
    assert "RLX_BACKEND_NOSUCHDEV='x': 'nosuchdev' is not a device label" in out
    assert "set RLX_BACKEND_CPU=cpu" in out
    assert "RLX_BACKEND_NOSUCHDEV" in caplog.text
    # a value naming no backend of a served device: warned, listed, and using the device raises
    monkeypatch.setenv("RLX_BACKEND_CPU", "numpyy")
    code, out, err = devices_out(capsys)
    assert "RLX_BACKEND_CPU='numpyy' names no backend for 'cpu' (backends serving it: cpu (plugin cpu" in out
    assert code == 2 and "RLX_BACKEND_CPU" in err
    with pytest.raises(PolicyError, match="RLX_BACKEND_CPU='numpyy'"):
        Session("cpu")


def test_backend_override_accepts_plugin_and_distribution_names(cpu_only, monkeypatch):
    for value in ("cpu", "rlx-cpu"):
        monkeypatch.setenv("RLX_BACKEND_CPU", value)
        assert registry().entry("cpu").name == "cpu"
        assert not registry().backend_override_warnings()


# --- 5. plugin API version ------------------------------------------------------------------------
def test_plugin_api_version_is_checked_at_load(tmp_path):
    make_dist(tmp_path, "rlx-future", npu_plugin(api=2), ep_name="future")
    make_dist(tmp_path, "rlx-sloppy", npu_plugin(api='"1"'), ep_name="sloppy", package="rlx_sloppy")
    make_dist(tmp_path, "rlx-old", "from rlx_core.runtime import hookimpl\n@hookimpl\ndef rlx_backends():\n"
                                   "    return []\n", ep_name="old")
    proc = child(tmp_path, """
        import json
        from rlx_core.runtime.registry import registry
        reg = registry()
        print(json.dumps({p.name: [p.status, p.error, p.api, p.note] for p in reg.plugins}))
        """, RLX_PLUGINS="future,sloppy,old,cpu")
    res = last_json(proc)
    status, error, api, _ = res["future"]
    assert status == "failed" and api == 2
    assert error == ("plugin rlx-future 0.3.0 was written for RLX plugin API 2; this rlx-core 0.1.0 speaks 1: "
                     "upgrade rlx-core (pip install -U rlx-core), or install a rlx-future release written for API 1")
    assert res["sloppy"][0] == "failed" and "RLX_PLUGIN_API must be an int" in res["sloppy"][1]
    assert res["old"][0] == "loaded" and "declares no RLX_PLUGIN_API; loaded as plugin API 1" in res["old"][3]
    assert res["cpu"][:3] == ["loaded", "", 1]
    # rlx devices lists the failure and the note
    devices = child(tmp_path, "from rlx_core.cli import main; main(['devices', '--probe', 'cheap'])",
                    RLX_PLUGINS="future,old,cpu").stdout
    assert "was written for RLX plugin API 2" in devices and "declares no RLX_PLUGIN_API" in devices
    assert re.search(r"cpu +rlx-cpu \S+ +loaded +api 1 ", devices)


def test_older_plugin_api_says_upgrade_the_plugin(monkeypatch):
    regmod = sys.modules["rlx_core.runtime.registry"]
    monkeypatch.setattr(regmod, "SUPPORTED_PLUGIN_APIS", frozenset({2}))
    reg = Registry(autoload=False)
    old = type("OldPlugin", (), {"RLX_PLUGIN_API": 1})()
    rec = reg._register(old, PluginRecord("old", "entry point rlx_old", distribution="rlx-old", version="0.1"))
    assert rec.status == "failed"
    assert "was written for RLX plugin API 1" in rec.error and "upgrade rlx-old (pip install -U rlx-old)" in rec.error


def test_every_plugin_in_this_repository_declares_the_plugin_api():
    """Each entry-point module under plugins/ sets RLX_PLUGIN_API = PLUGIN_API_VERSION (the
    distributions that are no backend, e.g. rlx-serve, declare no rlx.backends entry point)."""
    found = {}
    backends = set()
    for toml in sorted(ROOT.glob("plugins/*/pyproject.toml")):
        section = re.search(r'\[project\.entry-points\."rlx\.backends"\]\n((?:[^\[\n].*\n?)*)', toml.read_text())
        if section is None:
            continue
        backends.add(toml.parent.name)
        for module in re.findall(r'=\s*"([\w.]+)"', section.group(1)):
            path = toml.parent / (module.replace(".", "/") + ".py")
            tree = ast.parse(path.read_text())
            values = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                      and any(isinstance(t, ast.Name) and t.id == "RLX_PLUGIN_API" for t in n.targets)]
            found[module] = values
    assert {"rlx-cpu", "rlx-cuda", "rlx-tpu", "rlx-wgpu", "rlx-rocm", "rlx-mlx", "rlx-metal"} <= backends, backends
    assert found and all(v == [PLUGIN_API_VERSION] for v in found.values()), found


# --- 6. install hints -----------------------------------------------------------------------------
@pytest.mark.parametrize("device, hint", [
    ("cpu", 'pip install "rlx-core[cpu]"'),
    ("gpu", 'pip install "rlx-core[wgpu]"'),
    ("wgpu", 'pip install "rlx-core[wgpu]"'),
    ("vulkan", 'pip install "rlx-core[wgpu]"'),
    ("opengl", 'pip install "rlx-core[wgpu]"'),
    ("webgpu", 'pip install "rlx-core[wgpu]"'),
    ("cuda", 'pip install "rlx-cuda[cuda12]" (or "rlx-cuda[cuda13]" for a CUDA 13 driver)'),
    ("nvidia:1", 'pip install "rlx-cuda[cuda12]" (or "rlx-cuda[cuda13]" for a CUDA 13 driver)'),
    ("tpu", 'pip install "rlx-core[tpu]"'),
    ("rocm", 'pip install "rlx-core[rocm]"'),
    ("mlx", 'pip install "rlx-core[mlx]"'),
    ("metal", 'pip install "rlx-core[metal]"'),
    ("ane", 'pip install "rlx-core[metal]"'),
    ("onnx", 'pip install "rlx-core[onnx]"'),
    ("plot", 'pip install "rlx-core[plot]"'),
])
def test_install_hints_are_exact(device, hint, monkeypatch):
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    assert install_hint(device, Registry(autoload=False)) == hint


def test_devices_without_a_published_plugin_say_so(monkeypatch):
    from rlx_core.runtime import register_device
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    device = register_device("hint-npu", "an accelerator only a third-party plugin serves").label
    hint = install_hint(device, Registry(autoload=False))
    assert hint.startswith(f"no RLX plugin for '{device}' is published yet") and "pip install" not in hint


def test_a_plugin_that_failed_to_load_gets_its_error_not_an_install_hint(monkeypatch):
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    reg = Registry(autoload=False)
    reg._failed(PluginRecord("cuda", "entry point rlx_cuda.plugin", distribution="rlx-cuda", version="0.1.0"),
                ImportError("libcudart.so.12: cannot open shared object file"))
    hint = install_hint("cuda", reg)
    assert hint == ("plugin 'cuda' (rlx-cuda 0.1.0) is installed but failed to load: ImportError: libcudart.so.12: "
                    "cannot open shared object file")
    with pytest.raises(DeviceUnavailableError) as info:
        reg.entry("cuda")
    assert "failed to load: ImportError: libcudart.so.12" in str(info.value) and "pip install" not in str(info.value)
    assert install_hint("gpu", reg) == 'pip install "rlx-core[wgpu]"'  # other devices are unaffected


def test_registry_error_for_an_unserved_device_uses_the_hint(monkeypatch):
    monkeypatch.delenv("RLX_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    with pytest.raises(DeviceUnavailableError, match=re.escape("no installed plugin serves device 'gpu': "
                                                               'pip install "rlx-core[wgpu]"')):
        Registry(autoload=False).entry("gpu")


def test_install_commands_are_written_in_one_place():
    """Every `pip install` of a plugin in rlx_core comes from registry.install_hint."""
    offenders = []
    for path in sorted((ROOT / "rlx_core").rglob("*.py")):
        if path.name == "registry.py" and path.parent.name == "runtime":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pip install [\"']?rlx-(core\[(cpu|cuda|tpu|wgpu|gpu|rocm|mlx|metal|ane|vulkan)|cuda|cpu|tpu|wgpu)",
                         line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)

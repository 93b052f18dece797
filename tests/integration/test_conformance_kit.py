"""The conformance kit itself (rlx_core.testing): it cannot pass a backend that never
ran, it pins the backend by name, it reports coverage (also under xdist), and its
pytest plugin and ``rlx_core.testing`` import nothing they do not need.

Each case runs pytest in a subprocess on a small project: a hand-registered plugin
serving a device ``kit`` with two backends (``kit-a`` wins by priority) that run
graphs with the reference interpreter and claim relu and add on f32.
"""
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

KIT_PLUGIN = '''
import os
import numpy as np
from rlx_core import Availability, Backend, BackendFactory, Device, DType, ExecutableGraph, evaluate, hookimpl
from rlx_core.runtime import register_device

register_device("kit", "conformance-kit test device")
MODE = os.environ.get("KIT_MODE", "ok")


class Exe(ExecutableGraph):
    def __init__(self, graph):
        self.graph, self.params = graph, {}

    def set_param(self, name, value):
        self.params[name] = value

    def run(self, inputs, out=None):
        res = evaluate(self.graph, inputs, self.params)
        if out is None:
            return res
        for o, r in zip(out, res):
            np.copyto(o, r)
        return list(out)


class Kit(Backend):
    device = Device("kit")

    def __init__(self, name):
        self.name = name

    def is_available(self):
        return Availability(MODE != "unavailable", "no kit hardware (KIT_MODE=unavailable)")

    def supported_ops(self):
        return {"relu": frozenset({DType.F32}), "add": frozenset({DType.F32})}

    def compile(self, graph, options):
        return Exe(graph)


def _create_b():
    if MODE == "broken":
        raise RuntimeError("kit driver exploded")
    return Kit("kit-b")


@hookimpl
def rlx_backends():
    return [BackendFactory("kit-a", "kit", lambda: Kit("kit-a"), priority=1),
            BackendFactory("kit-b", "kit", _create_b)]
'''

CONFTEST = '''
import os
import pytest
import kitplugin
from rlx_core import register_backends

register_backends(kitplugin)


@pytest.fixture
def rlx_hardware_absent():
    return os.environ.get("KIT_ABSENT") or None
'''

TESTS = '''
from rlx_core.testing import ConformanceSuite


class TestKitB(ConformanceSuite):
    backend = "kit-b"
    device = "kit"
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("kit")
    (root / "kitplugin.py").write_text(textwrap.dedent(KIT_PLUGIN))
    (root / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (root / "test_kit.py").write_text(textwrap.dedent(TESTS))
    return root


def _pytest(project, *args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("RLX_", "PYTEST_", "KIT_"))}
    full.update(RLX_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=str(project), **env)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rlx-kinds=relu,add,exp",
                           *args], cwd=project, env=full, capture_output=True, text=True, timeout=180)
    return proc.returncode, proc.stdout + proc.stderr


def test_pins_the_backend_by_name_and_reports_coverage_under_xdist(project):
    rc, out = _pytest(project, "-n", "2")
    assert rc == 0, out[-4000:]
    # kit-a has the higher priority: only pinning by name tests kit-b; exp is not claimed
    m = re.search(r"^kit-b on kit: (\d+) kinds x dtypes in the suite; 2 claimed, 2 passed, 0 failed, "
                  r"(\d+) rejected at compile time", out, re.M)
    assert m and int(m.group(1)) == 2 + int(m.group(2)), out[-3000:]
    assert "kit-a on kit" not in out
    rc, out = _pytest(project, "--rlx-backend=kit-a")
    assert rc == 0 and re.search(r"^kit-a on kit: \d+ kinds x dtypes in the suite; 2 claimed, 2 passed", out, re.M), \
        out[-3000:]


def test_an_unavailable_backend_fails_unless_the_hardware_is_absent(project):
    rc, out = _pytest(project, KIT_MODE="unavailable")
    assert rc != 0, out[-3000:]
    assert "cannot test kit-b on kit: it is unavailable here" in out and "no kit hardware" in out, out[-3000:]
    assert re.search(r"^kit-b on kit: NEVER RAN", out, re.M), out[-3000:]
    rc, out = _pytest(project, KIT_MODE="unavailable", KIT_ABSENT="this CI machine has no kit")
    assert rc == 0, out[-3000:]
    assert re.search(r"^kit-b on kit: NOTHING RAN \(\d+ tests skipped, allowed by hardware absent: this CI machine "
                     r"has no kit\): .*no kit hardware", out, re.M), out[-3000:]
    assert not re.search(r"\d+ passed", out)


def test_a_backend_that_fails_to_start_fails_even_with_the_hardware_absent(project):
    rc, out = _pytest(project, KIT_MODE="broken", KIT_ABSENT="this CI machine has no kit")
    assert rc != 0, out[-3000:]
    assert "RuntimeError: kit driver exploded" in out and "excuses only an unavailable backend" in out, out[-3000:]
    rc, out = _pytest(project, "--rlx-allow-missing", KIT_MODE="broken")
    assert rc == 0 and re.search(r"^kit-b on kit: NOTHING RAN .*allowed by --rlx-allow-missing.*kit driver exploded",
                                 out, re.M), out[-3000:]


def test_imports_stay_light():
    code = ("import sys; import rlx_core; before = set(sys.modules)\n"
            "import rlx_core.testing.compare\n"
            "assert 'pytest' not in sys.modules, 'rlx_core.testing.compare imported pytest'\n"
            "import rlx_core.testing.plugin\n"
            "new = sorted(m for m in set(sys.modules) - before if m.startswith('rlx_core'))\n"
            "assert new == ['rlx_core.testing', 'rlx_core.testing.compare', 'rlx_core.testing.plugin'], new\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr

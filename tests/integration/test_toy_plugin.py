"""The example third-party plugin (examples/rlx-toy) as its authors would ship it: built
as a wheel, installed with rlx-core (also built from this checkout) into a fresh venv,
and tested by rlx-core's conformance suite there. A deliberately broken copy must fail
the suite with its import error; an unavailable one fails unless the run opts in.

Offline and fast: wheels are built with ``--no-build-isolation`` from copies of the
sources (no build/ in the checkout), and the fresh venv sees this environment's
third-party packages (numpy, pytest...) through symlinks -- but none of its rlx
distributions, so the toy is the only plugin there.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.name == "nt", reason="the fresh venv links site-packages with symlinks (POSIX)")]

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "examples" / "rlx-toy"
BROKEN = "rlx-toy is broken on purpose (tests/integration/test_toy_plugin.py)"


def _run(cmd, cwd, env=None, timeout=240):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check(proc):
    assert proc.returncode == 0, f"{proc.args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _link_site_packages(dest: Path) -> None:
    """Every package of this environment except rlx ones, as symlinks in ``dest``."""
    for src in {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}:
        for item in src.iterdir():
            name = item.name.lower()
            if name.startswith(("rlx", "__editable__", "__pycache__")) or name.endswith((".pth", ".egg-link")):
                continue
            if not (dest / item.name).exists():
                (dest / item.name).symlink_to(item)


def _build_wheel(src: Path, wheels: Path, work: Path) -> None:
    _check(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                 "--no-index", "-w", wheels, src], cwd=work))


@pytest.fixture(scope="module")
def toy_venv(tmp_path_factory):
    """(python of a fresh venv with rlx-core and rlx-toy installed from wheels, work dir)."""
    work = tmp_path_factory.mktemp("toy")
    core = work / "rlx-core-src"
    core.mkdir()
    for name in ["pyproject.toml", "README.md", *[p.name for p in ROOT.glob("LICENSE*")]]:
        shutil.copy2(ROOT / name, core / name)
    shutil.copytree(ROOT / "rlx_core", core / "rlx_core", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    good, broken = work / "rlx-toy-src", work / "rlx-toy-broken-src"
    shutil.copytree(TOY, good, ignore=ignore)
    shutil.copytree(TOY, broken, ignore=ignore)
    plugin = broken / "rlx_toy" / "plugin.py"
    plugin.write_text(f"raise ImportError({BROKEN!r})\n" + plugin.read_text())
    wheels, broken_wheels = work / "wheels", work / "broken-wheels"
    for src, dest in ((core, wheels), (good, wheels), (broken, broken_wheels)):
        _build_wheel(src, dest, work)

    venv = work / "venv"
    _check(_run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work))
    py = venv / "bin" / "python"
    site = Path(_check(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            cwd=work)).stdout.strip())
    _link_site_packages(site)
    _check(_run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *sorted(wheels.glob("*.whl"))],
                cwd=work))
    return py, work, broken_wheels


def _suite(py, work, *args, env=None):
    """Run the toy's conformance tests (a copy outside the checkout, so no conftest or
    pytest config of this repository applies)."""
    tests = work / "toy-tests"
    if not tests.exists():
        shutil.copytree(TOY / "tests", tests)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("RLX_", "PYTEST_", "PYTHONPATH"))}
    full_env.update(env or {})
    return _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", tests, *args], cwd=work, env=full_env)


def test_toy_plugin_passes_the_conformance_suite(toy_venv):
    py, work, _ = toy_venv
    # The venv holds exactly rlx-core and rlx-toy, installed (not editable, not this checkout).
    where = _check(_run([py, "-c", "import rlx_core, rlx_toy; print(rlx_core.__file__); print(rlx_toy.__file__)"],
                        cwd=work)).stdout
    assert str(ROOT) not in where and "site-packages" in where
    proc = _suite(py, work, "-n", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = re.search(r"^toy on toy: (\d+) kinds x dtypes in the suite; (\d+) claimed, (\d+) passed, (\d+) failed, "
                        r"(\d+) rejected at compile time", out, re.M)
    assert summary, f"no coverage line for the toy backend:\n{out[-4000:]}"
    total, claimed, passed, failed, rejected = map(int, summary.groups())
    # 11 kinds on f32 and f64, all claimed pairs pass, everything else is rejected at compile time
    assert (claimed, passed, failed) == (22, 22, 0), summary.group(0)
    assert claimed + rejected == total, summary.group(0)
    assert re.search(r"\d+ passed, \d+ skipped", out), out[-2000:]


def test_broken_toy_plugin_fails_the_suite(toy_venv):
    py, work, broken_wheels = toy_venv
    _check(_run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                 *broken_wheels.glob("*.whl")], cwd=work))
    try:
        proc = _suite(py, work, "--rlx-kinds=relu,add")
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"a plugin that fails to import passed the suite:\n{out[-4000:]}"
        assert BROKEN in out, out[-4000:]
        assert "cannot test toy on toy: its plugin failed to load" in out and "NEVER RAN" in out, out[-4000:]
        assert " passed" not in out.splitlines()[-1], out.splitlines()[-1]
        # Opted in (a CI job without the hardware), the same run skips and says that nothing ran.
        proc = _suite(py, work, "--rlx-kinds=relu,add", "--rlx-allow-missing")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        assert re.search(r"^toy on toy: NOTHING RAN \(\d+ tests skipped, allowed by "
                         r"--rlx-allow-missing\): .*" + re.escape(BROKEN), out, re.M), out[-4000:]
    finally:
        wheel = next((work / "wheels").glob("rlx_toy-*.whl"))
        _check(_run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall", wheel],
                    cwd=work))


def test_unavailable_toy_backend_fails_unless_opted_in(toy_venv):
    py, work, _ = toy_venv
    proc = _suite(py, work, "--rlx-kinds=relu", env={"RLX_TOY_DISABLE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "RLX_TOY_DISABLE is set" in out, out[-4000:]
    proc = _suite(py, work, "--rlx-kinds=relu", env={"RLX_TOY_DISABLE": "1", "RLX_CONFORMANCE_ALLOW_MISSING": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"^toy on toy: NOTHING RAN .*RLX_TOY_DISABLE is set", out, re.M), out[-4000:]

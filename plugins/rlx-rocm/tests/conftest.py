"""Test setup for rlx-rocm.

The rocm device is an AMD GPU through OpenCL; machines without one (CI) test on a stand-in
platform: every test in this directory runs with ``RLX_ROCM_OPENCL_PLATFORM=Portable``
(PoCL, OpenCL on the CPU) unless the variable is already set (``NVIDIA`` on the H200).
It is set per test (``monkeypatch``), so the rest of a ``pytest tests plugins`` session
never sees a stand-in ``rocm`` device. Every test here also runs in guard mode
(``RLX_ROCM_GUARD=1``, unless set otherwise): bytes of an arena that belong to no slot are
filled with a guard byte and checked after every run, so a kernel or copy that writes
outside its slot fails the test on PoCL too, where nothing faults. The program cache goes to a private directory of
the test session (shared by the xdist workers through an environment variable).
"""
import functools
import os
import tempfile

import pytest

STAND_IN = os.environ.get("RLX_ROCM_OPENCL_PLATFORM", "").strip() or "Portable"


@functools.lru_cache(maxsize=1)
def _missing_platform() -> str | None:
    try:
        import pyopencl as cl
        names = [f"{p.name} {p.vendor}" for p in cl.get_platforms()]
    except Exception as e:  # no pyopencl, no ICD loader, no platform
        return f"no OpenCL platform here ({type(e).__name__}: {e}); for PoCL: apt-get install pocl-opencl-icd"
    if not any(STAND_IN.lower() in n.lower() for n in names):
        return f"no OpenCL platform matching {STAND_IN!r} here (platforms: {names or 'none'})"
    return None


@pytest.fixture(autouse=True)
def rocm_stand_in(request, monkeypatch):
    """The stand-in platform for this test, the plugin registered with the registry (core
    tests may have reset it), and a skip where no OpenCL platform exists (the conformance
    suite decides for itself through ``rlx_hardware_absent``)."""
    monkeypatch.setenv("RLX_ROCM_OPENCL_PLATFORM", STAND_IN)
    monkeypatch.setenv("RLX_ROCM_GUARD", os.environ.get("RLX_ROCM_GUARD", "1"))
    from rlx_core.runtime import register_backends, registry
    from rlx_rocm import plugin
    if not any(e.name == plugin.BACKEND_NAME for e in registry().entries.get("rocm", [])):
        register_backends(plugin)
    if "no_platform" not in request.keywords and "rlx_target" not in request.fixturenames and _missing_platform():
        pytest.skip(_missing_platform())


@pytest.fixture
def rlx_hardware_absent():
    """The conformance suite's opt-in: without any usable OpenCL platform the rocm backend
    is unavailable and its suite skips; a plugin that fails to load still fails."""
    return _missing_platform()


def pytest_configure(config):
    config.addinivalue_line("markers", "no_platform: the test needs no OpenCL platform")

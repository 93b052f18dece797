"""Test setup for rlx-metal.

Off macOS there is no Metal: every test in this directory runs with
``RLX_METAL_ADAPTER_BACKEND=vulkan`` (the test aid: the ``metal`` device opens a Vulkan
adapter, Mesa's lavapipe in CI) unless the variable is already set. It is set per test
(``monkeypatch``), so the rest of a ``pytest tests plugins`` session never sees a
stand-in ``metal`` device. On a Mac nothing is redirected: the suite runs on Metal.
Calibration caches go to a private directory of the test session. The ``ane`` device
has no runtime off macOS: its conformance class skips with that reason, and the MIL
tests (building and validating Core ML programs) are what CI checks.
"""
import functools
import os
import sys
import tempfile

import pytest

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rlx-xdg-")  # mode 700; Mesa warns without one

ON_MAC = sys.platform == "darwin"
STAND_IN = os.environ.get("RLX_METAL_ADAPTER_BACKEND", "").strip() or (None if ON_MAC else "vulkan")
_CACHE = os.environ.setdefault("RLX_METAL_TEST_CACHE", tempfile.mkdtemp(prefix="rlx-metal-cache-"))


@functools.lru_cache(maxsize=1)
def _missing_adapter() -> str | None:
    """Why the adapter the metal device needs here is absent, else None."""
    want = (STAND_IN or "metal").lower()
    try:
        import wgpu
        types = {str(a.info.get("backend_type", "")).lower() for a in wgpu.gpu.enumerate_adapters_sync()}
    except Exception as e:  # no wgpu, or its native library cannot load
        return f"wgpu is not usable here: {type(e).__name__}: {e}"
    if want in types:
        return None
    hint = " (for lavapipe: apt-get install mesa-vulkan-drivers libvulkan1)" if want == "vulkan" else ""
    return f"no {want} adapter here (adapters: {', '.join(sorted(types)) or 'none'}){hint}"


def pytest_configure(config):
    config.addinivalue_line("markers", "no_adapter: the test needs no wgpu adapter")


@pytest.fixture(autouse=True)
def metal_test_mode(request, monkeypatch):
    """The Vulkan stand-in (off macOS), a private calibration cache, the plugin registered
    (core tests may have reset the registry), and a skip where the adapter is absent (the
    conformance suite decides for itself through ``rlx_hardware_absent``)."""
    if STAND_IN:
        monkeypatch.setenv("RLX_METAL_ADAPTER_BACKEND", STAND_IN)
    monkeypatch.setenv("XDG_CACHE_HOME", _CACHE)
    from rlx_core.runtime import register_backends, registry
    from rlx_metal import plugin
    if not any(e.name == plugin.METAL_BACKEND for e in registry().entries.get("metal", [])):
        register_backends(plugin)
    if "no_adapter" not in request.keywords and "rlx_target" not in request.fixturenames and _missing_adapter():
        pytest.skip(_missing_adapter())


@pytest.fixture
def rlx_hardware_absent(request):
    """The conformance suite's opt-in. ``metal``: unavailable only where the adapter it
    needs is absent. ``ane``: Core ML runs only on macOS."""
    device = request.config.getoption("--rlx-device") or getattr(request.cls, "device", None)
    backend = request.config.getoption("--rlx-backend") or getattr(request.cls, "backend", None)
    if "ane" in (device, backend) or backend == "coreml-ane":
        return None if ON_MAC else "no Core ML runtime off macOS (the MIL tests check the ane lowering here)"
    return _missing_adapter()

"""Test setup for rlx-wgpu: a private XDG_RUNTIME_DIR (Mesa warns without one), the plugin
registered by hand where it is not installed (a checkout on PYTHONPATH), and a skip with
the reason for tests that need an adapter on machines without one."""
import functools
import os
import tempfile

import pytest

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rlx-xdg-")  # mode 700


def pytest_configure(config):
    config.addinivalue_line("markers", "no_adapter: the test needs wgpu but no GPU adapter")


@functools.lru_cache(maxsize=1)
def _missing_adapter() -> str | None:
    try:
        import wgpu
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as e:  # no wgpu, or its native library cannot load
        return f"wgpu is not usable here: {type(e).__name__}: {e}"
    return None if adapters else "no wgpu adapter here (for lavapipe: apt-get install mesa-vulkan-drivers libvulkan1)"


@functools.lru_cache(maxsize=None)
def _missing_backend_type(device: str) -> str | None:
    """Why no adapter of the kind a forced-backend device needs exists here, else None."""
    want = {"vulkan": "vulkan", "opengl": "opengl", "directx": "d3d12"}.get(device)
    if want is None or _missing_adapter():
        return _missing_adapter()
    import wgpu
    types = {str(a.info.get("backend_type", "")).lower() for a in wgpu.gpu.enumerate_adapters_sync()}
    return None if want in types else f"no {want} adapter here (adapters: {', '.join(sorted(types))})"


@pytest.fixture
def rlx_hardware_absent(request):
    """The conformance suite's opt-in: on a machine without a (suitable) adapter the wgpu
    backend may be unavailable and its suite skips; a plugin that fails to load still
    fails. Everywhere else an unavailable wgpu device fails the suite."""
    device = request.config.getoption("--rlx-device") or getattr(request.cls, "device", None) or "gpu"
    return _missing_backend_type(device)


@pytest.fixture(autouse=True)
def wgpu_registered(request):
    """Make sure the registry has this plugin (core tests may have reset it), and skip
    tests that need an adapter where there is none (the conformance suite decides for
    itself, through ``rlx_hardware_absent``)."""
    from rlx_core.runtime import register_backends, registry
    from rlx_wgpu import plugin
    if not any(e.name == plugin.BACKEND_NAMES["gpu"] for e in registry().entries.get("gpu", [])):
        register_backends(plugin)
    if "no_adapter" not in request.keywords and "rlx_target" not in request.fixturenames and _missing_adapter():
        pytest.skip(_missing_adapter())

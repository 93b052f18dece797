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


@pytest.fixture(autouse=True)
def wgpu_registered(request):
    """Make sure the registry has this plugin (core tests may have reset it), and skip
    tests that need an adapter where there is none."""
    from rlx_core.runtime import register_backends, registry
    from rlx_wgpu import plugin
    if not any(e.name == plugin.BACKEND_NAMES["gpu"] for e in registry().entries.get("gpu", [])):
        register_backends(plugin)
    if "no_adapter" not in request.keywords and _missing_adapter():
        pytest.skip(_missing_adapter())

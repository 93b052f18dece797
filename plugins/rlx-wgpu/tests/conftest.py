"""Test setup for rlx-wgpu: a private XDG_RUNTIME_DIR (Mesa warns without one), and the
plugin registered by hand where it is not installed (a checkout on PYTHONPATH)."""
import os
import tempfile

import pytest

if not os.environ.get("XDG_RUNTIME_DIR"):
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="rlx-xdg-")  # mode 700


@pytest.fixture(autouse=True)
def wgpu_registered():
    """Make sure the registry has this plugin (core tests may have reset it)."""
    from rlx_core.runtime import register_backends, registry
    from rlx_wgpu import plugin
    if not any(e.name == plugin.BACKEND_NAMES["gpu"] for e in registry().entries.get("gpu", [])):
        register_backends(plugin)

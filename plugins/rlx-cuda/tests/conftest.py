"""Make the cuda plugin visible to the registry when it is not installed (CI runs the
tests from the source tree; the GPU machine installs it and uses the entry point)."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # test helpers (nvcc_check)
try:
    import rlx_cuda  # noqa: F401  (installed, or on PYTHONPATH)
except ImportError:
    sys.path.insert(0, str(HERE.parent))


@pytest.fixture(autouse=True)
def cuda_plugin_registered():
    from rlx_core.runtime import registry
    reg = registry()
    if "cuda" not in reg.entries:
        from rlx_core import register_backends
        from rlx_cuda import plugin
        register_backends(plugin)
    yield

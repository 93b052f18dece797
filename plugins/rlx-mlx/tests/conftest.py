"""rlx-mlx's tests: the plugin registered by hand where it is not installed (or where a
core test reset the registry); installed, its entry point registers it."""
import sys
from pathlib import Path

import pytest

try:
    import rlx_mlx  # noqa: F401  (installed, or on PYTHONPATH)
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture(autouse=True)
def mlx_plugin():
    import rlx_mlx.plugin
    from rlx_core.runtime import register_backends, registry
    if not any(entry.name == "mlx" for entry in registry().entries.get("mlx", [])):
        register_backends(rlx_mlx.plugin)
    return rlx_mlx.plugin

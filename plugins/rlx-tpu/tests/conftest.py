"""rlx-tpu's tests run the XLA path on XLA:CPU unless RLX_TPU_PLATFORM says otherwise
(set it to ``gpu`` on an NVIDIA machine, leave it unset on a TPU host)."""
import os

os.environ.setdefault("RLX_TPU_PLATFORM", "cpu")

import pytest  # noqa: E402

import rlx_tpu.plugin  # noqa: E402
from rlx_core.runtime import register_backends, registry  # noqa: E402


@pytest.fixture(autouse=True)
def tpu_plugin():
    """The plugin registered by hand where it is not installed (or where a core test reset
    the registry); installed, its entry point registers it."""
    if not any(entry.name == "tpu" for entry in registry().entries.get("tpu", [])):
        register_backends(rlx_tpu.plugin)
    return rlx_tpu.plugin

"""rlx-tpu's tests run the XLA path on XLA:CPU unless RLX_TPU_PLATFORM says otherwise
(set it to ``gpu`` on an NVIDIA machine, leave it unset on a TPU host).

XLA:CPU shows ``MESH_DEVICES`` host devices, so that the sharding tests have a mesh:
XLA reads the flag once, when JAX first starts a backend, so it is set here, at
collection time, before any test runs (no test module starts one on import).
"""
import os

MESH_DEVICES = 8
os.environ.setdefault("RLX_TPU_PLATFORM", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={MESH_DEVICES}").strip()

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

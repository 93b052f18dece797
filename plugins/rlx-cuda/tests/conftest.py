"""Make the cuda plugin visible to the registry when it is not installed (CI runs the
tests from the source tree; the GPU machine installs it and uses the entry point)."""
import functools
import glob
import os
import shutil
import subprocess
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


@functools.lru_cache(maxsize=1)
def _no_nvidia_gpu() -> str | None:
    """Why this machine has no NVIDIA GPU, or None when it has one (whatever CuPy says)."""
    gpus = "/proc/driver/nvidia/gpus"
    if glob.glob("/dev/nvidia[0-9]*") or (os.path.isdir(gpus) and os.listdir(gpus)):
        return None
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            listed = ""
        if "GPU" in listed:
            return None
    return "no NVIDIA GPU on this machine (no /dev/nvidia<N>, none listed by nvidia-smi)"


@pytest.fixture
def rlx_hardware_absent():
    """The conformance suite's opt-in: without an NVIDIA GPU the cuda backend may be
    unavailable (no CuPy, no driver) and its suite skips, saying so. With a GPU, an
    unavailable backend (e.g. CuPy not installed) fails the suite, and so does a plugin
    that fails to load, anywhere."""
    return _no_nvidia_gpu()

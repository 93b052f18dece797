"""Shared fixtures for the core tests."""
import importlib.util
import os

import pytest

from rlx_core.runtime.registry import reset_registry


@pytest.fixture
def fresh_registry():
    """Forget every plugin before and after the test, so entry points are re-read."""
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def tpu_device(fresh_registry, monkeypatch):
    """The tpu device on XLA:CPU (as rlx-tpu's own tests run it) unless RLX_TPU_PLATFORM
    names a platform; skips only where the rlx-tpu plugin is not installed or cannot run
    (e.g. the lowest-versions job, which installs rlx-core and rlx-cpu alone)."""
    from rlx_core.runtime import registry
    if importlib.util.find_spec("rlx_tpu") is None:
        pytest.skip("the rlx-tpu plugin is not installed")
    if not os.environ.get("RLX_TPU_PLATFORM"):
        monkeypatch.setenv("RLX_TPU_PLATFORM", "cpu")
    if not registry().is_available("tpu"):
        pytest.skip(f"device tpu is not available here: {registry().entry('tpu').availability().reason}")
    return "tpu"


_PLUGINS = {"cpu": "rlx_cpu", "tpu": "rlx_tpu", "gpu": "rlx_wgpu", "mlx": "rlx_mlx", "rocm": "rlx_rocm",
            "cuda": "rlx_cuda"}


@pytest.fixture(params=list(_PLUGINS))
def any_device(request, fresh_registry, monkeypatch):
    """Every device whose plugin is installed and which runs here, on the stand-ins the
    plugins' own tests use (tpu on XLA:CPU, rocm on PoCL without guard mode, unless
    RLX_TPU_PLATFORM / RLX_ROCM_OPENCL_PLATFORM say otherwise); the rest skip, saying why."""
    from rlx_core.runtime import registry
    name = request.param
    if importlib.util.find_spec(_PLUGINS[name]) is None:
        pytest.skip(f"the {_PLUGINS[name]} plugin is not installed")
    if name == "tpu" and not os.environ.get("RLX_TPU_PLATFORM"):
        monkeypatch.setenv("RLX_TPU_PLATFORM", "cpu")
    if name == "rocm":
        monkeypatch.setenv("RLX_ROCM_OPENCL_PLATFORM", os.environ.get("RLX_ROCM_OPENCL_PLATFORM") or "Portable")
        monkeypatch.setenv("RLX_ROCM_GUARD", "0")  # guard mode checks every run, so it waits for each
    if not registry().is_available(name):
        pytest.skip(f"device {name} is not available here")
    return name

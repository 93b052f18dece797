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
    names a platform; skips only where the rlx-tpu plugin is not installed."""
    if importlib.util.find_spec("rlx_tpu") is None:
        pytest.skip("the rlx-tpu plugin is not installed")
    if not os.environ.get("RLX_TPU_PLATFORM"):
        monkeypatch.setenv("RLX_TPU_PLATFORM", "cpu")
    return "tpu"

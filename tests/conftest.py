"""Shared fixtures for the core tests."""
import pytest

from rlx_core.runtime.registry import reset_registry


@pytest.fixture
def fresh_registry():
    """Forget every plugin before and after the test, so entry points are re-read."""
    reset_registry()
    yield
    reset_registry()

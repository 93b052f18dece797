"""The backend conformance suite through the metal plugin's code path: on Linux CI the
``metal`` device runs on lavapipe through the ``RLX_METAL_ADAPTER_BACKEND=vulkan`` test
aid (conftest.py); on a Mac on Metal. ``ane`` runs only on macOS: elsewhere its class
skips with the reason (tests/test_ane_mil.py checks the lowering there)."""
from rlx_core.testing import ConformanceSuite


class TestMetal(ConformanceSuite):
    backend = "metal"
    device = "metal"


class TestAne(ConformanceSuite):
    backend = "coreml-ane"
    device = "ane"

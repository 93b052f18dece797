"""The backend conformance suite on the best wgpu adapter (Mesa's lavapipe in CI)."""
from rlx_core.testing import ConformanceSuite


class TestGpuConformance(ConformanceSuite):
    device = "gpu"

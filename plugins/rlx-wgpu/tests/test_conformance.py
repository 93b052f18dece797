"""The backend conformance suite on wgpu: the best adapter (Mesa's lavapipe through
Vulkan in CI), the portable WebGPU profile (spec-default limits, no f16) and the OpenGL
backend (llvmpipe in CI). Devices absent here skip with the reason."""
from rlx_core.testing import ConformanceSuite


class TestGpuConformance(ConformanceSuite):
    device = "gpu"


class TestWebGpuConformance(ConformanceSuite):
    device = "webgpu"


class TestOpenGlConformance(ConformanceSuite):
    device = "opengl"

"""The backend conformance suite on the CUDA device (skips, with the probe's reason,
where CuPy or a GPU is missing)."""
from rlx_core.testing import ConformanceSuite


class TestCudaConformance(ConformanceSuite):
    device = "cuda"

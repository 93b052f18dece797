from rlx_core.testing import ConformanceSuite


class TestTpuConformance(ConformanceSuite):
    device = "tpu"

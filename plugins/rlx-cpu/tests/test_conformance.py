from rlx_core.testing import ConformanceSuite


class TestCpuConformance(ConformanceSuite):
    device = "cpu"

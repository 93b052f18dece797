from rlx_core.testing import ConformanceSuite


class TestMlx(ConformanceSuite):
    device = "mlx"

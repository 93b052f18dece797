"""Calibration feeds the cost model what MLX really does here: on MLX's Linux CPU build,
whose GEMMs run on a reference BLAS, the cost model must not pick mlx for graphs that
are mostly matmuls (measured for real, cached under a temporary XDG_CACHE_HOME)."""
import pytest

from rlx_core import Device, DevicePolicy, Graph, fastest_device_for
from rlx_core.runtime import registry
from rlx_core.select.calibration import calibrate, clear_memo, load_calibration
from rlx_core.select.devices import rank_devices


def _matmul_chain(n=512, depth=4):
    g = Graph("matmul_chain")
    y = g.input("x", (n, n))
    for i in range(depth):
        y = g.matmul(y, g.param(f"w{i}", (n, n)))
    g.set_outputs([g.tanh(y)])
    return g


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    clear_memo()
    yield tmp_path
    clear_memo()


def test_cost_model_keeps_matmul_heavy_graphs_off_mlx_cpu(fresh_cache):
    reg = registry()
    if not reg.is_available("cpu"):
        pytest.skip("the cpu backend (rlx-cpu) is not installed here")
    mlx = reg.backend("mlx")
    if mlx.device_kind != "cpu":
        pytest.skip(f"MLX runs on a {mlx.is_available().detail.get('gpu')} GPU here, not its CPU build")
    g = _matmul_chain()
    policy = DevicePolicy.only(["cpu", "mlx"])
    # A software device is not calibrated implicitly while a hardware one is viable (it
    # ranks after it anyway); `rlx calibrate` measures every device, as here.
    figures, cpu = calibrate("mlx"), calibrate("cpu")
    assert figures.software is True and load_calibration("mlx") == figures
    assert list(fresh_cache.glob("rlx/mlx-calib-*.json"))  # cached in the temporary folder
    ranking = dict(rank_devices(g, ["cpu", "mlx"], policy, calibrate=True))
    # The reference BLAS of MLX's CPU wheel is far slower than numpy's (3x: margin for a loaded host).
    assert figures.sgemm_gflops * 3 < cpu.sgemm_gflops, (figures.sgemm_gflops, cpu.sgemm_gflops)
    # The estimates alone rank cpu first (not only the rule that software devices go last).
    assert ranking[Device("mlx")] > 3 * ranking[Device("cpu")], ranking
    assert fastest_device_for(g, policy) == Device("cpu")

"""benchmarks/mlx_block.py compares like with like: its RLX graphs, its hand-written MLX
models and the reference interpreter compute the same block and matmul chain."""
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from rlx_core import evaluate
from rlx_core.testing import assert_close
from rlx_core.testing.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "mlx_block.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, skip_missing=True)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rlx_and_hand_written_blocks_agree(bench, dtype):
    cfg = bench.block_config(batch=2, seq=8, d_model=32, heads=2, ffn=64, dtype=dtype)
    weights, x = bench.block_weights(cfg), bench.block_input(cfg)
    compiled, _ = bench.compile_rlx(bench.rlx_block(cfg), "numpy", weights)
    got = compiled.run({"x": x})[0]
    assert_close(got, evaluate(bench.rlx_block(cfg), {"x": x}, weights)[0], dtype, 4, what="rlx vs reference")
    mlx_weights = {k: mx.array(v) for k, v in weights.items()}
    hand = bench._numpy(mx.compile(bench.mlx_block(cfg))(mlx_weights, mx.array(x)))
    assert_close(got, hand, dtype, 4, what="rlx vs hand-written mlx")
    idiomatic = bench._numpy(mx.compile(bench.mlx_block(cfg, idiomatic=True))(mlx_weights, mx.array(x)))
    assert_close(idiomatic.astype(np.float32), got.astype(np.float32), "bf16", 2, what="idiomatic mlx vs rlx")


def test_matmul_chains_agree(bench):
    g, weights = bench.chain_graph(16, 3, "f32"), bench.chain_weights(16, 3, "f32")
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    compiled, _ = bench.compile_rlx(g, "numpy", weights)
    raw = np.asarray(mx.compile(bench.mlx_chain(3))({k: mx.array(v) for k, v in weights.items()}, mx.array(x)))
    assert_close(compiled.run({"x": x})[0], evaluate(g, {"x": x}, weights)[0], "f32")
    assert_close(compiled.run({"x": x})[0], raw, "f32")


def test_benchmark_writes_its_results(bench, tmp_path):
    out = tmp_path / "mlx_test.json"
    argv = ["--batch", "1", "--seq", "8", "--d-model", "32", "--repeats", "2", "--chain-n", "32", "--chain-repeats", "2",
            "--output", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result["block"]["median_ms"]) == {"rlx_device", "mlx_device", "mlx_idiomatic_device", "rlx_host",
                                                 "mlx_host"}
    assert result["block"]["max_abs_diff_rlx_vs_mlx"] < 1e-3 * max(result["block"]["output_scale"], 1)
    assert result["chain"]["tflops"]["rlx"] > 0 and result["device"]["build"].startswith("mlx ")
    assert "| b1 s8 d32 f32 |" in (tmp_path / "mlx_block.md").read_text()

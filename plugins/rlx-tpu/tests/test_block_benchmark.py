"""benchmarks/tpu_block.py compares like with like: its RLX graph, its hand-written JAX
block and the reference interpreter compute the same transformer block."""
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from rlx_core import evaluate
from rlx_core.testing import assert_close
from rlx_core.testing.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "tpu_block.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rlx_and_hand_written_blocks_agree(bench, dtype):
    cfg = bench.block_config(batch=2, seq=8, d_model=32, heads=2, ffn=64, dtype=dtype)
    weights, x = bench.block_weights(cfg), bench.block_input(cfg)
    compiled, _ = bench.compile_rlx(cfg, "numpy", weights)
    got = compiled.run({"x": x})[0]
    assert_close(got, evaluate(bench.rlx_block(cfg), {"x": x}, weights)[0], dtype, 4, what="rlx vs reference")
    hand = np.asarray(jax.jit(bench.jax_block(cfg))(weights, x))
    assert_close(got, hand, dtype, 4, what="rlx vs hand-written jax")
    idiomatic = np.asarray(jax.jit(bench.jax_block(cfg, idiomatic=True))(weights, x))
    assert_close(idiomatic.astype(np.float32), got.astype(np.float32), "bf16", 2, what="idiomatic jax vs rlx")


def test_benchmark_writes_its_results(bench, tmp_path):
    out = tmp_path / "tpu.json"
    assert bench.main(["--batch", "1", "--seq", "8", "--d-model", "32", "--repeats", "3", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["median_ms"]) == {"rlx_device", "rlx_launch", "jax_device", "jax_idiomatic_device", "rlx_host",
                                        "jax_host", "jax_numpy_in", "jax_numpy_out"}
    assert result["run_split"] == pytest.approx(result["median_ms"]["rlx_host"] / result["median_ms"]["rlx_launch"])
    assert result["max_abs_diff_rlx_vs_jax"] < 1e-3 * max(result["output_scale"], 1)

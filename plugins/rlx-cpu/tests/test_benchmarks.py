"""The CPU benchmark's helpers: peers compute the same models, README tables regenerate."""
import sys
from pathlib import Path

import numpy as np
import pytest

from rlx_core import evaluate, models

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import cpu_peers  # noqa: E402
import update_readme  # noqa: E402

SMALL = {"mlp": dict(batch=3, sizes=(10, 6, 4)),
         "transformer_block": dict(batch=2, seq=5, d_model=16, heads=2, ffn=24),
         "small_cnn": dict(batch=1, size=12, widths=(3, 4, 5), classes=3),
         "elementwise_chain": dict(n=16)}


@pytest.mark.parametrize("peer", sorted(cpu_peers.PEERS))
@pytest.mark.parametrize("model", sorted(SMALL))
def test_peers_compute_the_same_model(peer, model):
    pytest.importorskip({"onnxruntime": "onnxruntime", "jax.jit": "jax", "numpy": "scipy"}[peer])
    graph, params = models.MODELS[model](**SMALL[model])
    inputs = models.example_inputs(graph)
    got = cpu_peers.PEERS[peer](graph, params, 2)(inputs)[0]
    np.testing.assert_allclose(np.asarray(got), evaluate(graph, inputs, params)[0], rtol=1e-4, atol=1e-5)


def test_readme_blocks_are_replaced_by_their_results_file(tmp_path):
    (tmp_path / "cpu.md").write_text("| a | b |\n")
    text = ("intro\n<!-- results:cpu -->\nold\n<!-- /results:cpu -->\n"
            "<!-- results:gpu -->\nkeep\n<!-- /results:gpu -->\n")
    new, updated, missing = update_readme.render(text, tmp_path)
    assert new == ("intro\n<!-- results:cpu -->\n| a | b |\n<!-- /results:cpu -->\n"
                   "<!-- results:gpu -->\nkeep\n<!-- /results:gpu -->\n")
    assert (updated, missing) == (["cpu"], ["gpu"])


def test_only_the_summary_of_a_detailed_results_file_is_copied(tmp_path):
    (tmp_path / "onnx.md").write_text("# title\n<!-- summary -->\n| x |\n<!-- /summary -->\nlong details\n")
    new, _, _ = update_readme.render("<!-- results:onnx -->\n<!-- /results:onnx -->\n", tmp_path)
    assert new == "<!-- results:onnx -->\n| x |\n<!-- /results:onnx -->\n"

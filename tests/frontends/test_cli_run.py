"""``rlx run``: on an exported model, with given or random inputs, --check against
onnxruntime, and in an environment without torch or onnxruntime."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from rlx_core.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def model_path(ox, tmp_path):
    """A small MLP with a symbolic batch dimension, saved to disk."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32)
    model = ox.make_model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["logits"]), helper.make_node("Softmax", ["logits"], ["probs"])],
        [("x", TensorProto.FLOAT, ["batch", 8])],
        [("logits", TensorProto.FLOAT, ["batch", 3]), ("probs", TensorProto.FLOAT, ["batch", 3])],
        initializers=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    path = tmp_path / "mlp.onnx"
    onnx.save_model(model, str(path))
    return path


def test_run_with_an_input_file_checks_against_onnxruntime_and_saves(model_path, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    assert main(["run", str(model_path), "--input", f"x={tmp_path / 'x.npy'}", "--device", "cpu", "--check",
                 "--repeat", "3", "--save", str(out)]) == 0
    text = capsys.readouterr().out
    assert "device  cpu (requested)" in text and "median of 3 runs" in text
    assert "logits  5x3    float32" in text and "check passed" in text
    saved = np.load(out)
    np.testing.assert_allclose(saved["probs"].sum(axis=1), np.ones(5), rtol=1e-6)


def test_run_auto_device_with_random_inputs_of_a_given_shape(model_path, capsys):
    assert main(["run", str(model_path), "--shape", "x=2,8"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"device  \w+ \(auto:", text) and "probs   2x3" in text


def test_usage_errors_exit_with_2_and_say_what_to_do(model_path, capsys):
    assert main(["run", str(model_path)]) == 2
    assert "input 'x' has a symbolic dimension 'batch': give its dims with --shape x=..." in capsys.readouterr().err
    assert main(["run", str(model_path), "--shape", "y=1,8"]) == 2
    assert "the model has no input(s) ['y']; its inputs: ['x']" in capsys.readouterr().err
    assert main(["run", str(model_path), "--input", "x"]) == 2
    assert "--input takes NAME=VALUE, got 'x'" in capsys.readouterr().err
    assert main(["run", "no-such-model.onnx"]) == 2
    assert "cannot read ONNX model 'no-such-model.onnx'" in capsys.readouterr().err


def test_a_device_that_is_not_installed_fails_with_the_reason(model_path, capsys, monkeypatch, fresh_registry):
    monkeypatch.setenv("RLX_PLUGINS", "cpu")  # whatever else this machine has installed
    assert main(["run", str(model_path), "--shape", "x=1,8", "--device", "tpu"]) == 1
    err = capsys.readouterr().err
    assert "requested device 'tpu'" in err and "no installed plugin serves it" in err


_WITHOUT = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError(f'{{name}} is not installed in this environment')
sys.meta_path.insert(0, Block())
from rlx_core.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _rlx_without(blocked: tuple[str, ...], *args) -> subprocess.CompletedProcess:
    """``rlx ARGS`` in a process where the ``blocked`` packages cannot be imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins" / "rlx-cpu")]))
    return subprocess.run([sys.executable, "-c", _WITHOUT.format(blocked=blocked), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_run_needs_neither_torch_nor_onnxruntime(model_path):
    """What ``pip install rlx-core[onnx] rlx-cpu`` provides is enough (no --check)."""
    done = _rlx_without(("torch", "onnxruntime", "scipy"), "run", model_path, "--shape", "x=4,8")
    assert done.returncode == 0, done.stderr
    assert "probs   4x3    float32" in done.stdout


def test_missing_onnx_packages_name_the_exact_install_command(model_path):
    done = _rlx_without(("onnx",), "run", model_path, "--shape", "x=4,8")
    assert done.returncode == 1 and 'needs the onnx package: pip install "rlx-core[onnx]"' in done.stderr, done.stderr
    done = _rlx_without(("onnxruntime",), "run", model_path, "--shape", "x=4,8", "--check")
    assert done.returncode == 2 and '--check needs onnxruntime: pip install "rlx-core[onnx]"' in done.stderr


@pytest.fixture
def torch_mlp(tmp_path):
    """The issue's model: a torch MLP (64-256-10, batch 8) exported to ONNX."""
    torch = pytest.importorskip("torch")
    import warnings
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    path = tmp_path / "mlp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation warning
        torch.onnx.export(module, (torch.randn(8, 64),), str(path), dynamo=False, input_names=["x"],
                          output_names=["y"])
    return path


def test_auto_never_picks_a_software_gpu_over_the_cpu(torch_mlp, capsys, monkeypatch, tmp_path, fresh_registry):
    """Every installed plugin, the default policy: on a machine whose GPU devices are a
    software adapter (lavapipe here), `rlx run` (auto) runs the MLP on cpu; so do
    RLX_DEVICES=cpu and the issue's RLX_DEVICES=cpu RLX_DEVICE=cpu."""
    from rlx_core.select import devices_for, is_software
    for name in ("RLX_PLUGINS", "RLX_DEVICES", "RLX_DENY_DEVICES", "RLX_PREFER_DEVICES", "RLX_DEVICE",
                 "RLX_BENCHMARK_PICK", "RLX_TPU_PLATFORM"):  # (tpu on XLA:CPU is not a software GPU)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["run", str(torch_mlp), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    picked = re.search(r"^device  (\S+) \((.*)\)$", out, re.M)
    from rlx_core.frontends.onnx import load_onnx
    viable = devices_for(load_onnx(str(torch_mlp)).graph)
    software = [d.label for d in viable if is_software(d)]
    hardware = [d.label for d in viable if not is_software(d)]
    assert picked.group(1) in hardware and picked.group(2).startswith("auto: cost model")
    if hardware == ["cpu"]:
        assert picked.group(1) == "cpu"
    for label in software:  # named as such in the reason
        assert f"{label} " in picked.group(2) and "(software device)" in picked.group(2)
    monkeypatch.setenv("RLX_DEVICES", "cpu")
    assert main(["run", str(torch_mlp), "--repeat", "1"]) == 0
    assert "device  cpu (auto: the only device that can run it under policy [allow=cpu" in capsys.readouterr().out
    monkeypatch.setenv("RLX_DEVICE", "cpu")
    assert main(["run", str(torch_mlp), "--repeat", "1"]) == 0
    assert "device  cpu (RLX_DEVICE=cpu)" in capsys.readouterr().out


def test_policy_variables_reach_rlx_run(model_path, capsys, monkeypatch, fresh_registry):
    monkeypatch.setenv("RLX_PLUGINS", "cpu")
    monkeypatch.setenv("RLX_DENY_DEVICES", "cpu")
    assert main(["run", str(model_path), "--shape", "x=1,8"]) == 1
    err = capsys.readouterr().err
    assert "no device can run graph" in err and "cpu: denied by DevicePolicy" in err
    monkeypatch.delenv("RLX_DENY_DEVICES")
    monkeypatch.setenv("RLX_DEVICE", "cuda")
    assert main(["run", str(model_path), "--shape", "x=1,8"]) == 1
    assert "RLX_DEVICE=cuda: device 'cuda' cannot be used" in capsys.readouterr().err


def test_run_reads_external_data_only_from_the_models_folder(model_path, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = onnx.load(str(model_path))
    path = tmp_path / "ext" / "mlp.onnx"
    path.parent.mkdir()
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert main(["run", str(path), "--shape", "x=2,8", "--device", "cpu", "--check"]) == 0
    assert "check passed" in capsys.readouterr().out
    hostile = onnx.load(str(path), load_external_data=False)
    next(e for e in hostile.graph.initializer[0].external_data if e.key == "location").value = "../mlp.onnx"
    path.write_bytes(hostile.SerializeToString())
    assert main(["run", str(path), "--shape", "x=2,8", "--device", "cpu"]) != 0
    assert "external data location '../mlp.onnx' climbs out with '..'" in capsys.readouterr().err

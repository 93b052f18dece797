"""``rlx serve``: the core's command reaches the plugin without importing Ray, says how to
install it when it is missing, and serves a model over HTTP until interrupted; Ray is never
started listening on the host's address."""
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from rlx_serve.demo import mlp_numpy


def child(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_building_rlx_parser_does_not_import_ray():
    out = child("import sys\nfrom rlx_core.cli import main\n"
                "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
                "print('ray' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert "--replicas" in out.stdout and "--port" in out.stdout and out.stdout.strip().endswith("False")


def test_without_the_plugin_rlx_serve_prints_the_install_command():
    out = child("import sys\nsys.modules['rlx_serve'] = None  # as if rlx-serve were not installed\n"
                "from rlx_core.cli import main\nsys.exit(main(['serve', 'model.onnx', '--replicas', '2']))")
    assert out.returncode == 2
    assert out.stderr.strip() == 'rlx serve needs the rlx-serve plugin: pip install "rlx-core[serve]"'


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray[serve] is not installed")
def test_start_local_refuses_a_ray_imported_for_a_routable_address():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    out = subprocess.run([sys.executable, "-c", "import ray, rlx_serve\nrlx_serve.start_local(port=1)"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1 and "ServeConfigError: ray was imported before rlx_serve.start_local" in out.stderr


def test_bad_arguments_exit_2_before_ray_starts(mlp):
    path, _ = mlp
    out = child(f"import sys\nfrom rlx_core.cli import main\n"
                f"sys.exit(main(['serve', {str(path)!r}, '--shape', 'x=1,a']))")
    assert out.returncode == 2 and "--shape 'x=1,a': expected NAME=D0,D1,..." in out.stderr
    out = child("import sys\nfrom rlx_core.cli import main\nsys.exit(main(['serve', 'missing.onnx']))")
    assert out.returncode == 2 and "ServeConfigError: cannot read ONNX model 'missing.onnx'" in out.stderr
    assert "Started a local Ray instance" not in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray[serve] is not installed")
def test_rlx_serve_serves_until_interrupted(mlp, helpers, tmp_path):
    path, weights = mlp
    port = helpers.free_port()
    rlx = os.path.join(os.path.dirname(sys.executable), "rlx")
    errors = tmp_path / "stderr"
    with open(errors, "w") as err:
        proc = subprocess.Popen([rlx, "serve", str(path), "--replicas", "1", "--port", str(port), "--cpus", "1",
                                 "--devices", "cpu"], stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, "RLX_PLUGINS": "cpu"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        deadline = time.monotonic() + 150
        ready = ""
        while not ready.startswith("serving"):
            assert proc.poll() is None and time.monotonic() < deadline, errors.read_text()[-3000:]
            try:
                ready = lines.get(timeout=1.0)
            except queue.Empty:
                continue
        assert f"at http://127.0.0.1:{port}/ (1 replica(s))" in ready
        x = helpers.rows_of(5, 4)
        status, _, body = helpers.post(port, json.dumps({"inputs": {"x": x.tolist()}}).encode())
        assert status == 200
        np.testing.assert_allclose(np.array(json.loads(body)["outputs"]["y"], np.float32), mlp_numpy(x, weights),
                                   rtol=1e-5, atol=1e-5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""What ``import rlx_core`` loads. Its cost is measured with ``python -X importtime``
(README); here the modules that made it slow are checked to stay out, which does not
depend on the machine's speed."""
import json
import subprocess
import sys

# Loaded on first use only: bfloat16 support (~0.4 s), device selection and hardware
# telemetry, entry-point metadata, the test framework, and every backend library.
HEAVY = ("ml_dtypes", "rlx_core.select", "rlx_core.hw", "rlx_core.llm", "rlx_core.frontends", "importlib.metadata",
         "pytest", "numba", "cupy", "jax", "wgpu", "onnx", "torch")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_import_rlx_core_loads_nothing_heavy():
    assert _loaded_after("import rlx_core") == []


def test_bfloat16_and_selection_load_on_first_use():
    assert _loaded_after("import rlx_core; rlx_core.DType.BF16.np") == ["ml_dtypes"]
    assert "rlx_core.select" in _loaded_after("from rlx_core import DevicePolicy")


def test_bfloat16_arrays_map_to_bf16_once_ml_dtypes_is_loaded():
    import ml_dtypes
    import numpy as np

    from rlx_core import DType
    assert DType.of(np.zeros(2, ml_dtypes.bfloat16).dtype) is DType.BF16 and DType.of("bfloat16") is DType.BF16
    assert DType.BF16.itemsize == 2 and DType.BF16.np == np.dtype(ml_dtypes.bfloat16)

#!/usr/bin/env bash
# rlx-rocm on the NVIDIA H200 machine, through NVIDIA's OpenCL as a stand-in for an AMD GPU
# (no internet there; Python 3.12; CuPy there):
#   1. register NVIDIA's OpenCL driver with the ICD loader and list the platforms;
#   2. calibration: f32 GEMM 4096^3 per tile (the winner becomes the default), bandwidth, round trip;
#   3. the conformance suite on `rocm` (RLX_ROCM_OPENCL_PLATFORM=NVIDIA);
#   4. the f32 4096^3 GEMM benchmark against cuBLAS SGEMM through CuPy (TF32 off);
#   5. torch-exported ONNX models against onnxruntime, where torch/onnx/onnxruntime are installed.
# Results: $OUT/{calibration.log (the platforms, then calibration),calibration.json,conformance.txt,
# conformance.xml,rocm_h200.*,rocm_onnx_h200.*} (8 files: a run that left 10 there got only 8 back)
# and benchmarks/results/rocm_h200.{json,md}, rocm_onnx_h200.{json,md}.
# Carry .whl (pyopencl, pytools, platformdirs, siphash24 wheels for cp312 manylinux; see
# plugins/rlx-rocm/README.md). Run from anywhere in the repository.
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/rlx-rocm-check}
mkdir -p "$OUT"
status=0

lib=/usr/local/nvidia/lib64/libnvidia-opencl.so.1
if [ -f "$lib" ] && ! grep -qs nvidia-opencl /etc/OpenCL/vendors/*.icd; then
  mkdir -p /etc/OpenCL/vendors && echo "$lib" > /etc/OpenCL/vendors/nvidia.icd
fi
if ! python3 -c 'import pyopencl' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/plugins/rlx-rocm${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export RLX_ROCM_OPENCL_PLATFORM=${RLX_ROCM_OPENCL_PLATFORM:-NVIDIA}
export XDG_CACHE_HOME=/tmp/rlx-rocm-cache  # not under $OUT: program binaries would come back too

python3 - <<'PY' 2>&1 | tee "$OUT/calibration.log"
import pyopencl as cl
for p in cl.get_platforms():
    for d in p.get_devices():
        print(p.name, "|", p.version, "|", d.name, "|", d.version, "| driver", d.driver_version,
              "| CUs", d.max_compute_units, "| local mem", d.local_mem_size)
PY

python3 -c 'from rlx_core.runtime import register_backends as r; import rlx_rocm.plugin as p; r(p)
from rlx_rocm.calibrate import main; main(["--refresh"])' 2>&1 | tee -a "$OUT/calibration.log" || status=1
cp "$XDG_CACHE_HOME"/rlx/rocm-tuning-*.json "$OUT/calibration.json" 2>/dev/null

# rlx-core's pytest plugin (the suite's options) is an entry point only where rlx-core is installed.
suite_plugin=$(python3 -c 'from importlib.metadata import entry_points as e
print("" if any(p.name == "rlx_conformance" for p in e(group="pytest11")) else "-p rlx_core.testing.plugin")')
# shellcheck disable=SC2086
timeout 400 python3 -m pytest $suite_plugin plugins/rlx-rocm/tests -q -n 8 -rs -p no:cacheprovider \
  --junitxml="$OUT/conformance.xml" > "$OUT/conformance.txt" 2>&1 || status=1
tail -n 3 "$OUT/conformance.txt"

python3 benchmarks/rocm_gemm.py --size "${RLX_ROCM_CHECK_N:-4096}" --out benchmarks/results/rocm_h200.json || status=1
cp benchmarks/results/rocm_h200.json benchmarks/results/rocm_h200.md "$OUT/" 2>/dev/null

if python3 -c 'import torch, onnx, onnxruntime' 2>/dev/null; then
  python3 benchmarks/rocm_onnx.py --out benchmarks/results/rocm_onnx_h200.json || status=1
  cp benchmarks/results/rocm_onnx_h200.json benchmarks/results/rocm_onnx_h200.md "$OUT/" 2>/dev/null
else
  echo "torch, onnx or onnxruntime missing: ONNX model check not run" | tee "$OUT/onnx_skipped.txt"
fi
exit $status

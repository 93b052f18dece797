#!/usr/bin/env bash
# rlx-wgpu on the NVIDIA H200 machine (no internet; Python 3.12; CuPy there), in < 5 minutes:
#   1. the NVIDIA Vulkan adapter is found (Vulkan loader from the carried .gl/*.deb);
#   2. calibration, measured afresh: f32 matmul 4096^3 with every tile of LARGE_TILES (fastest of 3 timings,
#      the best 3 timed 3 times more, interleaved; the winner becomes the default), bandwidth, round trip;
#   3. the conformance suite on the `vulkan` device (i64 rows included);
#   4. i64 across its range and the torch-exported models on `gpu` (the NVIDIA adapter; the models skip without torch);
#   5. the f32 4096x4096 matmul benchmark against cuBLAS SGEMM (TF32 off) through CuPy: one table with the
#      calibrated default and every tile variant (fastest of 5 interleaved rounds each; % of cuBLAS timed in the same rounds).
# Results: $OUT/{adapters.txt,calibration.json,conformance.txt,conformance.xml,int64.txt,wgpu_h200.json,wgpu_h200.md}
# and benchmarks/results/wgpu_h200.{json,md}.
# Carry: .gl (libvulkan1 and the GL loaders as .deb) and .whl (wgpu, cffi, pycparser, rendercanvas
# wheels for cp312 manylinux); see plugins/rlx-wgpu/README.md. Run from anywhere in the repository.
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/rlx-wgpu-check}
mkdir -p "$OUT"
status=0

. plugins/rlx-wgpu/gpu_env.sh || exit 1

python3 - <<'PY' 2>&1 | tee "$OUT/adapters.txt"
import wgpu
for a in wgpu.gpu.enumerate_adapters_sync():
    print(a.summary, "|", dict(a.info))
PY

python3 -c 'from rlx_core.runtime import register_backends as r; import rlx_wgpu.plugin as p; r(p)
from rlx_wgpu.calibrate import main; main(["--device", "vulkan", "--refresh"])' 2>&1 | tee "$OUT/calibration.log" || status=1
cp "$XDG_CACHE_HOME"/rlx/wgpu-calib-vulkan-*.json "$OUT/calibration.json" 2>/dev/null

# rlx-core's pytest plugin (the suite's --rlx-device option) is an entry point only where rlx-core is installed.
suite_plugin=$(python3 -c 'from importlib.metadata import entry_points as e
print("" if any(p.name == "rlx_conformance" for p in e(group="pytest11")) else "-p rlx_core.testing.plugin")')
# shellcheck disable=SC2086
timeout 200 python3 -m pytest $suite_plugin plugins/rlx-wgpu/tests/test_conformance.py -k TestGpuConformance \
  --rlx-device=vulkan -q -n 8 -rs --junitxml="$OUT/conformance.xml" > "$OUT/conformance.txt" 2>&1 || status=1
tail -n 3 "$OUT/conformance.txt"
# shellcheck disable=SC2086
timeout 200 python3 -m pytest $suite_plugin plugins/rlx-wgpu/tests/test_int64.py plugins/rlx-wgpu/tests/test_onnx_models.py \
  -q -n 0 -rs > "$OUT/int64.txt" 2>&1 || status=1
tail -n 3 "$OUT/int64.txt"

python3 benchmarks/wgpu_matmul.py --device vulkan --n "${RLX_WGPU_CHECK_N:-4096}" --out benchmarks/results/wgpu_h200.json || status=1
cp benchmarks/results/wgpu_h200.json benchmarks/results/wgpu_h200.md "$OUT/" 2>/dev/null
exit $status

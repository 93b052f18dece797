#!/usr/bin/env bash
# rlx-mlx on the NVIDIA H200 machine (no internet; Python 3.12) with MLX's CUDA 13 build:
#   1. MLX installed from carried wheels, its device and build as `rlx devices` shows them;
#   2. the conformance suite on the `mlx` device;
#   3. torch-exported ONNX models against onnxruntime (where torch/onnx/onnxruntime are there);
#   4. benchmarks/mlx_block.py: transformer block b8 s512 d1024 h16 bf16 against the same block
#      in MLX under mx.compile (target <= 1.10x), 4 chained bf16 8192^2 matmuls against raw MLX
#      (target >= 0.90x).
# Results: $OUT/{devices.txt,conformance.txt,conformance.xml,onnx_models.txt,mlx_h200.json,mlx_block.md}
# and benchmarks/results/mlx_h200.json, mlx_block.md.
#
# Carrying MLX (the mlx-cuda-13 wheel is about 90 MB, above one call's 64 MiB): on the
# development machine
#   pip download --no-deps --python-version 3.12 --platform manylinux_2_35_x86_64 \
#       -d /tmp/w "mlx==0.32.4" "mlx-cuda-13==0.32.4"
#   mkdir -p .whl/mlx-part1 .whl/mlx-part2 .whl/mlx-part3 && mv /tmp/w/mlx-0.32.4-*.whl .whl/mlx-part1/
#   split -b 30000000 /tmp/w/mlx_cuda_13-*.whl /tmp/w/cuda13.part.
#   mv /tmp/w/cuda13.part.aa .whl/mlx-part1/; mv /tmp/w/cuda13.part.ab .whl/mlx-part2/; mv /tmp/w/cuda13.part.ac .whl/mlx-part3/
# then carry .whl/mlx-part1, .whl/mlx-part2, .whl/mlx-part3 in three calls less than 30 s apart
# (each call keeps the folders earlier calls left), the last one running this script. The CUDA 13
# libraries MLX loads (cublas, cudnn, cufft, nvrtc, cusolver, nccl) are installed there already.
# RLX_MLX_CHECK_ARGS replaces the benchmark's arguments (e.g. a smaller block for a quick try),
# RLX_MLX_CHECK_RESULT its results file (default benchmarks/results/mlx_h200.json).
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/rlx-mlx-check}
mkdir -p "$OUT"
status=0

if ! python3 -c 'import mlx.core' 2>/dev/null; then
  parts=$(ls .whl/mlx-part*/cuda13.part.* 2>/dev/null | sort -t. -k3)
  small=$(ls .whl/mlx-part*/mlx-*.whl 2>/dev/null | head -n 1)
  if [ -z "$parts" ] || [ -z "$small" ]; then
    echo "MLX is not importable and no carried wheels were found under .whl/mlx-part*/ (see the top of $0)"
    exit 1
  fi
  version=$(basename "$small" | cut -d- -f2)
  wheel=/tmp/mlx_cuda_13-$version-py3-none-manylinux_2_35_x86_64.whl
  # shellcheck disable=SC2086
  cat $parts > "$wheel"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/mlx-site \
    "$small" "$wheel" || exit 1
  export PYTHONPATH="/tmp/mlx-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/plugins/rlx-mlx${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export XDG_CACHE_HOME=/tmp/rlx-mlx-cache

python3 -c 'import mlx.core as mx; print("mlx", mx.__version__, "default device", mx.default_device(),
"cuda", mx.cuda.is_available())
from rlx_core.runtime import register_backends as r; import rlx_mlx.plugin as p; r(p)
from rlx_core.cli import main; main(["devices"])' 2>&1 | tee "$OUT/devices.txt" || status=1

# rlx-core's pytest plugin (the suite's options) is an entry point only where rlx-core is installed.
suite_plugin=$(python3 -c 'from importlib.metadata import entry_points as e
print("" if any(p.name == "rlx_conformance" for p in e(group="pytest11")) else "-p rlx_core.testing.plugin")')
workers=$(python3 -c 'import xdist' 2>/dev/null && echo "-n 8")
# shellcheck disable=SC2086
timeout 400 python3 -m pytest $suite_plugin $workers plugins/rlx-mlx/tests/test_conformance.py -q -rs \
  --junitxml="$OUT/conformance.xml" > "$OUT/conformance.txt" 2>&1 || status=1
tail -n 3 "$OUT/conformance.txt"

# shellcheck disable=SC2086
timeout 300 python3 -m pytest $suite_plugin plugins/rlx-mlx/tests/test_onnx_models.py -q -rs \
  > "$OUT/onnx_models.txt" 2>&1 || status=1
tail -n 2 "$OUT/onnx_models.txt"

result=${RLX_MLX_CHECK_RESULT:-benchmarks/results/mlx_h200.json}
# shellcheck disable=SC2086
python3 benchmarks/mlx_block.py ${RLX_MLX_CHECK_ARGS:---batch 8 --seq 512 --d-model 1024 --dtype bf16 --chain-n 8192} \
  --output "$result" 2>&1 | tee "$OUT/benchmark.txt" || status=1
cp "$result" "$(dirname "$result")/mlx_block.md" "$OUT/" 2>/dev/null
exit $status

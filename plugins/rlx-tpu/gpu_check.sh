#!/usr/bin/env bash
# rlx-tpu's run path on the NVIDIA H200 machine (XLA:GPU through JAX's CUDA plugin, standing in
# for a TPU), in one command:
#   1. benchmarks/tpu_dispatch.py: run / submit against RLX's XLA program called directly and
#      jax.jit, per call (one add on [8]: host time only; the b1 transformer block);
#   2. benchmarks/run_split.py: full run() (numpy in/out) against the device's work alone, for
#      rlx-tpu and rlx-wgpu (Vulkan, set up by plugins/rlx-wgpu/gpu_env.sh) -- issue 18's split;
#   3. benchmarks/stream_bench.py: N submits against N runs, tpu and cuda (issue 19: >= 1.3x);
#   4. benchmarks/tpu_block.py on the b1 block: rlx vs jax.jit, with the run-path split and
#      jax.jit's own numpy transfer costs.
# Results: $OUT/{dispatch,run_split,stream}.{json,md,txt}, $OUT/tpu_b1.{json,txt} and tpu.md
# (the repository's results files are left alone: copy what should be kept).
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/rlx-tpu-check}
mkdir -p "$OUT"
export RLX_TPU_PLATFORM=gpu XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
status=0
# rlx-core and the plugins these benchmarks load, registered offline (their entry points)
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/rlx-cpu -e plugins/rlx-cuda \
  -e plugins/rlx-tpu -e plugins/rlx-wgpu 2>&1 | tail -3
# wgpu on the GPU through Vulkan for run_split (carry .gl and .whl as for rlx-wgpu's gpu_check.sh)
. plugins/rlx-wgpu/gpu_env.sh || echo "wgpu could not be set up: run_split covers tpu alone"

python3 benchmarks/tpu_dispatch.py --output "$OUT/dispatch.json" 2>&1 | tee "$OUT/dispatch.txt" || status=1
python3 benchmarks/run_split.py --devices tpu,gpu --output "$OUT/run_split.json" 2>&1 | tee "$OUT/run_split.txt" \
  || status=1
python3 benchmarks/stream_bench.py --devices tpu,cuda --output "$OUT/stream.json" 2>&1 | tee "$OUT/stream.txt" \
  || status=1
python3 benchmarks/tpu_block.py --repeats 200 --output "$OUT/tpu_b1.json" 2>&1 | tee "$OUT/tpu_b1.txt" \
  || status=1
exit $status

#!/usr/bin/env bash
# rlx-serve on the NVIDIA H200 machine (offline): Ray Serve replicas sharing the GPU (cuda)
# against one process calling `run` in a loop.
#   1. ray[serve] importable, or installed offline from carried wheels (below); rlx-core,
#      rlx-cpu, rlx-cuda and rlx-serve installed editable, offline;
#   2. the plugin's tests (a local 2-CPU cluster on 127.0.0.1, as in CI; about 2 minutes);
#   3. benchmarks/serve_bench.py on cuda: 1, 2 and 4 replicas sharing the one GPU (each asks
#      1/7 of it), 16 HTTP clients, 8-row requests of a 1024-4096-256 MLP batched up to 32 rows,
#      against the same graph compiled for 8 rows and run in a loop in one process.
# Results: $OUT/{tests.txt,tests.xml,bench.txt,serve_cuda.json,serve_cuda.md} and
# benchmarks/results/serve_cuda.{json,md}. Hard timeouts: 300 s (tests) + 420 s (benchmark).
#
# Carrying Ray (its wheel is about 80 MB, above one call's 64 MiB): on the development machine
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d /tmp/w "ray[serve]==2.60.0"
#   mkdir -p .whl/ray-part1 .whl/ray-part2 .whl/ray-part3
#   split -b 30000000 /tmp/w/ray-2.60.0-*.whl /tmp/w/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl.part.
#   mv /tmp/w/*.part.aa .whl/ray-part1/; mv /tmp/w/*.part.ab .whl/ray-part2/; mv /tmp/w/*.part.ac .whl/ray-part3/
#   rm /tmp/w/ray-2.60.0-*.whl; mv /tmp/w/*.whl .whl/ray-part3/      # the dependencies (check the sizes)
# then carry .whl/ray-part1, .whl/ray-part2, .whl/ray-part3 in three calls less than 30 s apart,
# the last one running this script. SECTIONS="tests bench" (the default) picks sections;
# RLX_SERVE_BENCH_ARGS replaces the benchmark's arguments.
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
OUT=${OUT:-/tmp/rlx-serve-check}
PY=${PYTHON:-python3}
SECTIONS=${SECTIONS:-tests bench}
mkdir -p "$OUT" benchmarks/results
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/rlx-serve-cache}
status=0

if ! "$PY" -c 'import ray.serve' 2>/dev/null; then
  wheels=/tmp/rlx-serve-wheels
  mkdir -p "$wheels"
  cp .whl/ray-part*/*.whl "$wheels"/ 2>/dev/null
  for first in .whl/ray-part*/*.whl.part.aa; do
    [ -e "$first" ] || { echo "ray is not importable and no carried wheels were found under .whl/ray-part*/ (see $0)"; exit 1; }
    name=$(basename "$first" .part.aa)
    for part in .whl/ray-part*/"$name".part.*; do echo "${part##*.part.} $part"; done | sort | cut -d' ' -f2- \
      | while read -r part; do cat "$part"; done > "$wheels/$name"   # the parts in suffix order (aa, ab, ...)
  done
  "$PY" -m pip install -q --no-index --find-links "$wheels" "ray[serve]" || exit 1
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/rlx-cpu -e plugins/rlx-cuda \
  -e plugins/rlx-serve || exit 1
"$PY" -c 'import ray, rlx_serve; print("ray", ray.__version__)' | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$OUT/versions.txt"

if [[ " $SECTIONS " == *" tests "* ]]; then
  echo "=== plugin tests ($(date +%T))"
  timeout 300 "$PY" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning plugins/rlx-serve/tests \
    --junitxml "$OUT/tests.xml" > "$OUT/tests.txt" 2>&1 || status=1
  tail -n 5 "$OUT/tests.txt"
fi

if [[ " $SECTIONS " == *" bench "* ]]; then
  echo "=== serve_bench on cuda ($(date +%T))"
  # shellcheck disable=SC2086
  timeout 420 "$PY" benchmarks/serve_bench.py ${RLX_SERVE_BENCH_ARGS:---device cuda --replicas 1,2,4 --clients 16 \
    --features 1024 --hidden 4096 --outputs 256 --rows 8 --max-batch-size 32 --requests 400 --rounds 5} \
    > "$OUT/bench.txt" 2>&1 || status=1
  grep -v "INFO\|WARNING" "$OUT/bench.txt" | tail -n 12
  cp benchmarks/results/serve_cuda.json benchmarks/results/serve_cuda.md "$OUT"/ 2>/dev/null
fi
exit $status

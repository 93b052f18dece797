#!/usr/bin/env bash
# One-shot check of the CUDA backend on a GPU machine (offline). From the repo root:
#     OUT=/some/dir bash plugins/rlx-cuda/gpu_check.sh
# 1. installs rlx-core, rlx-cpu, rlx-cuda editable, offline (wheels in .whl/ first, e.g. pluggy);
# 2. prints the device and the backend's probe;
# 3. runs the CUDA tests, then the conformance suite on "cuda" (-x --maxfail=20 -q);
# 4. runs benchmarks/cuda_bench.py.
# Everything lands in $OUT (logs, junit xml, benchmark json/md) and benchmarks/results/.
# Budget (hard timeouts): cuda tests 2 min, conformance 3 min, benchmarks 2.5 min (each step has a hard timeout).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT" benchmarks/results
PY="${PYTHON:-python}"
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR="${CUPY_CACHE_DIR:-$OUT/cupy-cache}"
section() { echo; echo "=== $* ($(date +%T))"; }

section install
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -3
fi
$PY -m pip install -q --no-deps --no-build-isolation -e . -e plugins/rlx-cpu -e plugins/rlx-cuda 2>&1 | tail -3

section device
nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,power.draw --format=csv 2>&1 | head -3
$PY - <<'PY' 2>&1 | tee "$OUT/probe.txt"
import importlib.metadata as md
for p in ("cupy-cuda13x", "cupy-cuda12x", "numpy", "torch", "ml_dtypes", "pluggy", "nvidia-ml-py"):
    try: print(f"{p} {md.version(p)}")
    except md.PackageNotFoundError: pass
from rlx_core.runtime import registry
e = registry().entry("cuda")
print("rlx cuda plugin:", e.plugin, "| availability:", e.availability())
from rlx_cuda.nvml import NvmlProvider
p = NvmlProvider()
print("nvml:", p.count(), "GPU(s)", p.read(0) if p.count() else "")
PY

XDIST=""
$PY -c "import xdist" 2>/dev/null && XDIST="-n 8"

section "cuda plugin tests"
timeout 120 $PY -m pytest plugins/rlx-cuda/tests -q -x --maxfail=20 --tb=short -rfE -p no:randomly \
  --ignore=plugins/rlx-cuda/tests/test_conformance.py $XDIST --junitxml="$OUT/cuda_tests.xml" \
  2>&1 | tee "$OUT/cuda_tests.log" | grep -v -E '^[.sx]+ *\[' | tail -60
echo "cuda tests exit: ${PIPESTATUS[0]}"

section "conformance suite on cuda"
timeout 180 $PY -m pytest plugins/rlx-cuda/tests/test_conformance.py --maxfail=400 -q --tb=short -rfE $XDIST \
  --junitxml="$OUT/conformance.xml" 2>&1 | tee "$OUT/conformance.log" | grep -v -E '^[.sx]+ *\[' | tail -80
echo "conformance exit: ${PIPESTATUS[0]}"
$PY - "$OUT/conformance.xml" <<'PY' 2>/dev/null
import sys, xml.etree.ElementTree as ET, collections
root = ET.parse(sys.argv[1]).getroot()
kinds = collections.Counter()
for case in root.iter("testcase"):
    for tag in ("failure", "error"):
        for el in case.findall(tag):
            name = case.get("name", "")
            kinds[name.split("[", 1)[-1].split(":", 1)[0]] += 1
            print(f"{tag.upper()} {name}: {(el.get('message') or '')[:300]}")
print("failures by kind:", dict(kinds))
PY

section benchmarks
timeout 150 $PY benchmarks/cuda_bench.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60
echo "bench exit: ${PIPESTATUS[0]}"
cp -f "$OUT"/cuda_bench.json "$OUT"/cuda_bench.md benchmarks/results/ 2>/dev/null
section done

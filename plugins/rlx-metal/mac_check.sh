#!/usr/bin/env bash
# rlx-metal on a Mac -- the one command for a Mac user (this project has no Mac, so none of
# this has been run by it). From anywhere in the repository:
#
#     bash plugins/rlx-metal/mac_check.sh
#
# 1. creates .venv-mac (Python >= 3.11; PYTHON=python3.12 to choose) with rlx-core, rlx-cpu,
#    rlx-wgpu and rlx-metal (coremltools, pyobjc's MetalPerformanceShaders) and the test tools;
# 2. lists the devices (metal and ane should be available) and calibrates metal (WGSL tiles
#    and MPS);
# 3. runs plugins/rlx-metal/tests: the conformance suite on metal (real Metal: the Vulkan test
#    aid is switched off) and on ane (Core ML predictions), and the MIL checks;
# 4. runs the benchmark (matmul GFLOP/s, encoder block on cpu / metal / ane).
# Everything goes to $OUT (default ./metal-check-<date>): devices.txt, calibration.json,
# tests.txt, junit.xml, bench.md, bench.json. Send that folder back (or open an issue with it).
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root
if [ "$(uname -s)" != Darwin ]; then
  echo "mac_check.sh is for macOS (this is $(uname -s)); on Linux the tests run with the Vulkan test aid:" >&2
  echo "  python -m pytest -n 2 plugins/rlx-metal" >&2
  exit 2
fi
OUT=${OUT:-$PWD/metal-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
VENV=${RLX_VENV:-.venv-mac}
unset RLX_METAL_ADAPTER_BACKEND  # real Metal, not the test aid
export XDG_CACHE_HOME="$OUT/cache" PYTHONUNBUFFERED=1
status=0

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || exit 1
. "$VENV/bin/activate"
pip install -q --upgrade pip setuptools wheel || exit 1
pip install -q -e . -e plugins/rlx-cpu -e plugins/rlx-wgpu -e plugins/rlx-metal \
  pytest pytest-xdist hypothesis scipy || exit 1

{ sw_vers; sysctl -n machdep.cpu.brand_string; python --version; pip list 2>/dev/null | grep -iE 'rlx|wgpu|coreml|pyobjc|numpy'
  rlx devices; } 2>&1 | tee "$OUT/devices.txt"
python -m rlx_metal.calibrate --refresh > "$OUT/calibration.json" 2> "$OUT/calibration.log" || status=1
python -m pytest -n 2 -q -rs plugins/rlx-metal --junitxml="$OUT/junit.xml" 2>&1 | tee "$OUT/tests.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1
python -m rlx_metal.bench --out "$OUT/bench" || status=1
echo "results in $OUT (exit status $status)"
exit $status

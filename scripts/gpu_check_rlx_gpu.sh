#!/usr/bin/env bash
# `rlx gpu` on a machine with NVIDIA GPUs (the lent H200): telemetry through NVML, and the
# control knobs' errors -- WITHOUT changing any GPU setting. From the repo root:
#     OUT=/some/dir bash scripts/gpu_check_rlx_gpu.sh        (carry .whl: nvidia-ml-py and rich
#                                                             wheels are in .whl/telemetry/)
# 1. installs rlx-core editable and nvidia-ml-py + rich (offline, from .whl/telemetry/);
# 2. telemetry: `rlx gpu` (table) and `rlx gpu --json` (saved to $OUT/gpu.json), checked:
#    at least one cuda GPU, and temperature, power, cap, SM clock, memory clock, utilization
#    and memory reported (not null), hotspot null (NVML has no hotspot sensor);
# 3. `rlx gpu --watch --count 3 --interval 200 --json`: exactly three samples;
# 4. control, each expected to FAIL before any NVML set call, so nothing changes:
#    - power cap 1 W below NVML's minimum and 100 W above its maximum -> ThermalRangeError,
#      exit 1 (checked against nvmlDeviceGetPowerManagementLimitConstraints first; the
#      request is skipped if NVML does not report the range, since it would then be sent);
#    - lock clocks 1000 MHz above the highest supported graphics clock -> ThermalRangeError
#      (skipped when the supported clocks are not reported, for the same reason);
#    - fan 50 % on a GPU with no fans (nvmlDeviceGetNumFans == 0, as on the H200) ->
#      ThermalUnsupportedError (skipped if the GPU has fans: as root that would set them);
#    - fan 101 % -> usage error, exit 2 (argument parsing; NVML is not called);
#    - permission: as an unprivileged user (uid 65534 via setpriv when run as root), the
#      power cap set to its CURRENT value -> ThermalPermissionError. NVML refuses non-root
#      callers, and were it to accept, the cap would stay what it is. Skipped when setpriv
#      is missing or the unprivileged user cannot run this Python.
#    Then `rlx gpu --json` again: the power cap must equal the one read in step 2.
# Everything lands in $OUT (logs and JSON); the last line says PASS or FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export PYTHONUNBUFFERED=1
fail=0
section() { echo; echo "=== $* ($(date +%T))"; }
bad() { echo "FAIL: $*"; fail=1; }
# expect CODE PATTERN -- CMD...: run CMD, check its exit status and that stdout+stderr match PATTERN
expect() {
  local code=$1 pattern=$2; shift 3
  local log; log=$("$@" 2>&1); local rc=$?
  echo "\$ ${*#$PY -m }"; echo "$log" | sed 's/^/    /'
  [ "$rc" = "$code" ] || bad "exit $rc, expected $code: $*"
  echo "$log" | grep -Eq "$pattern" || bad "output lacks /$pattern/: $*"
}
RLX="$PY -m rlx_core.cli gpu"

section install
if compgen -G ".whl/telemetry/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps .whl/telemetry/*.whl 2>&1 | tail -3
fi
$PY -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
$PY -c "import pynvml, rich; print('nvidia-ml-py', pynvml.__file__, '| rich ok')" || bad "pynvml/rich not importable"
nvidia-smi --query-gpu=index,name,driver_version,temperature.gpu,power.draw,power.limit,clocks.sm,memory.used \
  --format=csv 2>&1 | tee "$OUT/nvidia-smi.csv"

section telemetry
$RLX --device cuda 2>&1 | tee "$OUT/table.txt"
$RLX --json > "$OUT/gpu.json" 2> "$OUT/gpu.err"; cat "$OUT/gpu.json"; cat "$OUT/gpu.err"
$PY - "$OUT/gpu.json" <<'PY' || fail=1
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["device"] == "cuda"]
assert rows, "no cuda GPU in rlx gpu --json"
need = ("temp_c", "power_w", "power_cap_w", "clock_mhz", "mem_clock_mhz", "util_percent", "mem_used_mib",
        "mem_total_mib")
missing = [(r["index"], k) for r in rows for k in need if r[k] is None]
print(f"{len(rows)} cuda GPU(s); mem_temp_c {[r['mem_temp_c'] for r in rows]}, fan {[r['fan_percent'] for r in rows]}")
assert not missing, f"not reported: {missing}"
assert all(r["hotspot_c"] is None for r in rows), "NVML has no hotspot sensor: expected null"
assert all(0 < r["power_w"] < 2000 and 0 < r["temp_c"] < 120 for r in rows), "implausible readings"
print("telemetry ok")
PY

section watch
$RLX --watch --count 3 --interval 200 --json --device cuda --index 0 > "$OUT/watch.jsonl"
n=$(wc -l < "$OUT/watch.jsonl"); echo "$n samples"; [ "$n" = 3 ] || bad "--count 3 gave $n samples"

section control
# The ranges NVML reports, read without any set call.
eval "$($PY - <<'PY'
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
def get(fn):
    try:
        return fn()
    except pynvml.NVMLError:
        return None
cap = get(lambda: pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h))
cur = get(lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h))
clocks = get(lambda: [c for m in pynvml.nvmlDeviceGetSupportedMemoryClocks(h)
                      for c in pynvml.nvmlDeviceGetSupportedGraphicsClocks(h, m)])
fans = get(lambda: pynvml.nvmlDeviceGetNumFans(h))
print(f"CAP_MIN={cap[0] / 1000 if cap else ''} CAP_MAX={cap[1] / 1000 if cap else ''} "
      f"CAP_NOW={cur / 1000 if cur else ''} CLOCK_MAX={max(clocks) if clocks else ''} FANS={'' if fans is None else fans}")
PY
)"
echo "power cap range [$CAP_MIN, $CAP_MAX] W, now $CAP_NOW W; highest graphics clock $CLOCK_MAX MHz; fans $FANS"
if [ -n "$CAP_MIN" ] && [ -n "$CAP_MAX" ]; then
  low=$($PY -c "print(max($CAP_MIN - 1, 0.5))"); high=$($PY -c "print($CAP_MAX + 100)")
  expect 1 "ThermalRangeError: cuda:0 power cap \(W\) .* is outside the allowed range" -- \
    $RLX --device cuda --index 0 --power-cap "$low"
  expect 1 "ThermalRangeError" -- $RLX --device cuda --index 0 --power-cap "$high"
else
  echo "SKIPPED power cap range check: NVML reports no range (the request would reach the driver)"
fi
if [ -n "$CLOCK_MAX" ]; then
  expect 1 "ThermalRangeError: cuda:0 (min|max) clock \(MHz\) .* is outside the allowed range" -- \
    $RLX --device cuda --index 0 --lock-clocks "$((CLOCK_MAX + 1000))"
else
  echo "SKIPPED clock range check: NVML reports no supported clocks"
fi
if [ "$FANS" = 0 ]; then
  expect 1 "ThermalUnsupportedError: cuda:0 fan control: this GPU has no fans" -- \
    $RLX --device cuda --index 0 --fan 50
else
  echo "SKIPPED fan check: the GPU reports ${FANS:-unknown} fan(s); a set could succeed"
fi
expect 2 "expected a fan duty of 0-100" -- $RLX --device cuda --index 0 --fan 101
if [ -n "$CAP_NOW" ]; then
  if [ "$(id -u)" != 0 ]; then
    expect 1 "ThermalPermissionError" -- $RLX --device cuda --index 0 --power-cap "$CAP_NOW"
  elif command -v setpriv > /dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups \
      "$PY" -c "import rlx_core.hw.nvml, pynvml" 2> /dev/null; then
    expect 1 "ThermalPermissionError: cuda:0 power cap: permission denied" -- \
      setpriv --reuid=65534 --regid=65534 --clear-groups $RLX --device cuda --index 0 --power-cap "$CAP_NOW"
  else
    echo "SKIPPED permission check: running as root and uid 65534 cannot run $PY (or no setpriv)"
  fi
fi
$RLX --json --device cuda --index 0 > "$OUT/after.json"
$PY - "$OUT/gpu.json" "$OUT/after.json" <<'PY' || fail=1
import json, sys
before = next(r for r in json.load(open(sys.argv[1])) if r["device"] == "cuda" and r["index"] == 0)
after = json.load(open(sys.argv[2]))[0]
assert before["power_cap_w"] == after["power_cap_w"], (before["power_cap_w"], after["power_cap_w"])
print(f"power cap unchanged: {after['power_cap_w']} W")
PY

section result
[ "$fail" = 0 ] && echo "PASS" || echo "FAIL"
exit "$fail"

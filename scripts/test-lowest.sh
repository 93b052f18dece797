#!/usr/bin/env bash
# The declared floors, tested: a fresh venv of its own (.venv-lowest) with rlx-core and rlx-cpu
# installed from this tree and every dependency pinned to the lowest version its pyproject
# declares (scripts/lowest-constraints.py reads the ">=" floors, so the pins cannot drift
# from the pyprojects), then the core suite and the rlx-cpu suite. Tests of packages not
# installed here (onnx, onnxruntime, torch, gguf, jax, wgpu, ...) skip themselves.
#   scripts/test-lowest.sh [pytest args]
#   PYTHON=python3.10 scripts/test-lowest.sh          another interpreter
#   RLX_LOWEST_EXTRAS=onnx scripts/test-lowest.sh     rlx-core's [onnx] extra at its floors too
#     (the ONNX node-test harness needs onnx >= 1.23 and the f16 QuantizeLinear comparison
#     onnxruntime >= 1.30: the [test] extra's floors, above the [onnx] extra's)
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${RLX_LOWEST_VENV:-.venv-lowest}
PY=${PYTHON:-python3}
[ ! -e "$VENV" ] || [ -f "$VENV/pyvenv.cfg" ] || { echo "$VENV exists and is not a venv" >&2; exit 1; }
rm -rf "$VENV"   # fresh: nothing left over from an earlier run or other pins
"$PY" -m venv "$VENV"
echo '*' > "$VENV/.gitignore"   # keep the venv out of git status
. "$VENV/bin/activate"
pip install -q --upgrade pip
pip install -q packaging 'tomli; python_version < "3.11"'

# What is tested at its floor: rlx-core's dependencies (and the extras named), rlx-cpu's.
EXTRAS=${RLX_LOWEST_EXTRAS:-}
python scripts/lowest-constraints.py "pyproject.toml${EXTRAS:+[$EXTRAS]}" plugins/rlx-cpu/pyproject.toml \
  > "$VENV/constraints.txt"
echo "lowest declared versions:"; sed 's/^/  /' "$VENV/constraints.txt"

# The build backend at its floor too: the editable installs (and the tests that build wheels
# offline) use this venv's setuptools. Test tools are not pinned; pip picks versions
# compatible with the pins.
pip install -q -c "$VENV/constraints.txt" setuptools
pip install -q -c "$VENV/constraints.txt" --no-build-isolation -e ".${EXTRAS:+[$EXTRAS]}" \
  -e plugins/rlx-cpu pytest pytest-xdist hypothesis scipy

# The pins must be what is installed (a stale venv or a resolver surprise fails here).
python - "$VENV/constraints.txt" <<'PY'
import sys
from importlib.metadata import version
from packaging.version import Version
bad = []
for line in open(sys.argv[1]):
    name, want = line.split("#")[0].strip().split("==")
    if Version(version(name)) != Version(want):
        bad.append(f"{name}: installed {version(name)}, floor {want}")
if bad:
    sys.exit("\n".join(bad))
PY

python -m pytest -q -n "${RLX_TEST_WORKERS:-2}" tests plugins/rlx-cpu/tests "$@"

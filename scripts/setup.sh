#!/usr/bin/env bash
# Set up a development environment on a fresh machine (Debian + Python >= 3.10):
# a virtualenv in .venv (or $RLX_VENV) with rlx-core and every plugin under plugins/ installed editable
# (rlx-serve with `test` only).
#   scripts/setup.sh          runtime only
#   scripts/setup.sh test     plus the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f scripts/apt-packages.txt ] && command -v apt-get >/dev/null; then
  # System libraries some plugins need (OpenCL on PoCL, Vulkan on lavapipe).
  missing=$(xargs -a scripts/apt-packages.txt -n1 sh -c 'dpkg -s "$0" >/dev/null 2>&1 || echo "$0"')
  if [ -n "$missing" ]; then
    SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
  fi
fi

PY=${PYTHON:-python3}
VENV=${RLX_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
. "$VENV/bin/activate"
pip install -q --upgrade pip setuptools wheel
if [ "${1:-}" = test ]; then
  # torch's CPU build is pinned first: an unpinned torch resolves to a multi-GB CUDA build.
  pip install -q "torch==2.13.0" || pip install -q --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"
  extras="[test]"
else
  extras=""
fi
# rlx-serve (Ray Serve: a server stack the backends and the demo do not need) with the tests only.
plugins=$(for d in plugins/rlx-*/; do
  if [ "$d" != plugins/rlx-serve/ ] || [ "${1:-}" = test ]; then printf -- "-e %s " "$d"; fi
done)
pip install -q -e ".${extras}" $plugins

#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo: a transformer block on every available device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
. "${RLX_VENV:-.venv}/bin/activate"
rlx demo "$@"

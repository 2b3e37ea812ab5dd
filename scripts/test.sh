#!/usr/bin/env bash
# Quickstart step 2: set up (idempotent) and run the whole test suite, end-to-end tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # every package (pyproject.toml [tool.mypy] files)
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Quickstart step 2: set up (idempotent) and run the whole test suite, end-to-end tests included.
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --fast     the inner loop: everything but the tests on the real local models
#                                   (e2e), the agent CLIs (agent_cli) and the container image (image)
# Any other arguments are passed on to pytest. The 25 slowest tests are listed at the end of a run.
set -euo pipefail
cd "$(dirname "$0")/.."
selection=()
if [[ "${1:-}" == "--fast" ]]; then
    shift
    selection=(-m "not e2e and not agent_cli and not image")
fi
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # every package (pyproject.toml [tool.mypy] files)
exec .venv/bin/python -m pytest --durations=25 "${selection[@]}" "$@"

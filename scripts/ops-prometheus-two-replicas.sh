#!/usr/bin/env bash
# Operations drill, run by hand: a real Prometheus scraping two `cascade serve` replicas that share
# the Redis at 127.0.0.1:6379 (under a private key prefix), a bounded load against a scripted
# upstream, then `cascade policy push` switching both replicas. Loopback ports only; everything it
# starts is stopped at the end. Needs Debian's `prometheus` package (scripts/setup.sh installs it).
#   scripts/ops-prometheus-two-replicas.sh [--requests 400] [--concurrency 8] [--json]
#   scripts/ops-prometheus-two-replicas.sh --pool --requests 40 --concurrency 2   # real local models
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python deploy/tools/prometheus_drill.py "$@"

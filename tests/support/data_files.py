"""The data files the tests read, all inside the repository (source and licence in each folder's README)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# Real per-query correctness and confidence of 12 LLMs on multiple-choice questions (MIT, Plaut et al.).
PLAUT_MC = REPO_ROOT / "data" / "plaut-mc"
PLAUT_RUNS = PLAUT_MC / "runs.csv.gz"
PLAUT_PRICES = PLAUT_MC / "prices.yaml"
# The held-out curves cached by "Is Escalation Worth It?" (Apache-2.0), one folder per dataset.
PAPER_CURVES = REPO_ROOT / "data" / "paper-curves"
# Real llama.cpp answers with logprobs, as the servers returned them.
UPSTREAM_ANSWERS = REPO_ROOT / "tests" / "fixtures" / "upstream"

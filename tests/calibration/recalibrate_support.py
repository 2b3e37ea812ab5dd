"""Traffic for ``cascade recalibrate`` tests: synthetic judge-labelled rows, real stores, real Redis."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from calibration.calibrate import calibrate
from calibration.runs import load_runs
from calibration.tiers import parse_tiers
from policies import save_policy
from policies.schema import Policy
from tests.support.traffic_kinds import COST, MODELS, TEXT_AGREEMENT, TIERS, logprobs
from traffic.export import write_runs
from traffic.rows import TrafficRow

AGREEMENT = TEXT_AGREEMENT  # large is the reference: the judge's labels agree with it
# (query index, model, agrees with the reference) -> the stored label
Labeller = Callable[[int, str, bool], float]


def traffic(n: int, *, seed: int, label: Labeller | None = None, prefix: str = "req") -> list[TrafficRow]:
    """n queries answered by every model; a confident answer agrees with the reference more often.

    ``label`` turns (query index, model, agrees) into the stored label (default: the agreement).
    """
    rng = random.Random(seed)
    now = datetime.now(UTC)
    rows = []
    for q in range(n):
        for model in MODELS:
            agrees = rng.random() < AGREEMENT[model]
            confidence = rng.uniform(0.6, 0.99) if agrees else rng.uniform(0.3, 0.75)
            rows.append(
                TrafficRow(
                    query_id=f"{prefix}-{q}",
                    model=model,
                    correct=label(q, model, agrees) if label else (1.0 if agrees else 0.0),
                    prompt_tokens=20,
                    completion_tokens=5,
                    cost_usd=COST[model],
                    logprobs=logprobs(round(confidence, 4)),
                    timestamp=now - timedelta(seconds=n - q),
                    judge="reference" if model == "large" else "choice",
                )
            )
    return rows


def policy_from(rows: list[TrafficRow], path: Path) -> Policy:
    """Calibrate a policy on ``rows`` (as ``cascade traffic export`` + ``cascade calibrate``), save it."""
    runs = path.with_suffix(".runs.jsonl")
    write_runs(rows, runs)
    policy = calibrate(load_runs(runs), parse_tiers(TIERS)).policy
    save_policy(policy, path)
    return policy

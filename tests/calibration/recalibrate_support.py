"""Traffic for ``cascade recalibrate`` tests: synthetic judge-labelled rows, real stores, real Redis
(the options that push there and what it then serves)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from calibration.policy.calibrate import calibrate
from calibration.runs import load_runs
from calibration.tiers import parse_tiers
from policies import parse_policy, save_policy
from policies.schema import Policy
from publishing import PolicyKeys
from tests.support.shared_redis import REDIS_URL
from tests.support.traffic_kinds import COST, MODELS, TEXT_AGREEMENT, TIERS, Labeller, kind_traffic, logprobs
from traffic.export import write_runs
from traffic.rows import TrafficRow

AGREEMENT = TEXT_AGREEMENT  # large is the reference: the judge's labels agree with it


def traffic(n: int, *, seed: int, label: Labeller | None = None, prefix: str = "req") -> list[TrafficRow]:
    """n text queries answered by every model; a confident answer agrees with the reference more often.

    ``label`` turns (query index, model, agrees) into the stored label (default: the agreement).
    """
    return kind_traffic(
        n, kind="text", agreement=AGREEMENT, seed=seed, prefix=prefix, label=label, judge="choice"
    )


def push_to(keys: PolicyKeys) -> list[str]:
    """The options that push the new policy to the real Redis under ``keys``' prefix."""
    return ["--push", REDIS_URL, "--prefix", keys.prefix]


def served(client: Any, keys: PolicyKeys) -> tuple[str | None, str | None]:
    """The id of the policy served under ``keys`` and its version (None, None: nothing served)."""
    raw, version = client.mget(keys.policy_current, keys.policy_version)
    return (None if raw is None else parse_policy(raw).policy_id), version


def policy_from(rows: list[TrafficRow], path: Path) -> Policy:
    """Calibrate a policy on ``rows`` (as ``cascade traffic export`` + ``cascade calibrate``), save it."""
    runs = path.with_suffix(".runs.jsonl")
    write_runs(rows, runs)
    policy = calibrate(load_runs(runs), parse_tiers(TIERS)).policy
    save_policy(policy, path)
    return policy


# Routed traffic: a hard question (40%) defeats the small model, whose confidence says nothing
# about it; the prompt's words do, so a router can tell and a cascade cannot.
ROUTED_AGREEMENT = {"medium": 0.9, "large": 1.0}
# economy: what routing the easy questions to small and the hard ones to medium costs (0.00022);
# the medium model alone (0.0004) does not fit.
ROUTED_TIERS = {
    "default_tier": "balanced",
    "tiers": {"economy": {"max_cost_usd": 0.0003}, "balanced": {"max_cost_usd": 0.0012}},
}
EASY, HARD = "add the numbers", "prove the theorem about"


def routed_prompt(q: int, hard: bool) -> str:
    """The request text of query ``q`` (its words say whether it is hard)."""
    return f"{HARD if hard else EASY} {q % 97} and {(q * 13) % 89}"


def routed_traffic(
    n: int, *, seed: int, label: Labeller | None = None, prefix: str = "req"
) -> list[TrafficRow]:
    """n queries whose rows carry their ``cheap-v1`` router features (``route``), as the gateway's
    sampler stores them; small agrees with the reference exactly on the easy ones."""
    from policies.route_features import CHEAP, cheap_features

    rng = random.Random(seed)
    now = datetime.now(UTC)
    rows = []
    for q in range(n):
        hard = rng.random() < 0.4
        values = [float(v) for v in cheap_features(routed_prompt(q, hard), 0, "text")]
        route = {
            "features": CHEAP,
            "values": values,
            "mechanism": None,
            "router_probability": None,
            "models": None,
        }
        for model in MODELS:
            agrees = not hard if model == "small" else rng.random() < ROUTED_AGREEMENT[model]
            rows.append(
                TrafficRow(
                    query_id=f"{prefix}-{q}",
                    model=model,
                    correct=label(q, model, agrees) if label else (1.0 if agrees else 0.0),
                    prompt_tokens=20,
                    completion_tokens=5,
                    cost_usd=COST[model],
                    logprobs=logprobs(round(rng.uniform(0.3, 0.99), 4)),
                    timestamp=now - timedelta(seconds=n - q),
                    judge="reference" if model == "large" else "choice",
                    route=route,
                )
            )
    return rows


def routed_policy_from(rows: list[TrafficRow], path: Path, splits: int = 5) -> Policy:
    """Calibrate with the router (``cascade calibrate --mechanisms cascade,routed,hybrid``) on
    ``rows`` and their stored features, save it."""
    from dataclasses import replace

    import numpy as np

    from calibration.heldout_expected import HeldoutSettings
    from calibration.routing.mechanisms import MECHANISMS, RoutingOptions

    runs = path.with_suffix(".runs.jsonl")
    write_runs(rows, runs)
    matrix = load_runs(runs)
    by_query = {row.query_id: row.route["values"] for row in rows if row.route is not None}
    matrix = replace(matrix, features=np.array([by_query[str(q)] for q in matrix.query_ids]))
    policy = calibrate(
        matrix,
        parse_tiers(ROUTED_TIERS),
        heldout=HeldoutSettings(splits=splits),
        routing=RoutingOptions(MECHANISMS, "cheap-v1"),
    ).policy
    save_policy(policy, path)
    return policy

"""The model-free pieces of tests/e2e/test_learning_two_replicas.py (unit-tested on their own).

* The **starting policy**. The test serves a deliberately poor policy, so that a recalibration on a
  few dozen sampled requests has something real to improve and pushing is the expected outcome:
  ``never_escalating_policy(source)`` keeps the source policy's models (every one of them gets a
  traffic row per sample), scorer and the cheap model's calibration score bins (for the drift
  metric), and serves one tier whose route is ``[cheap, reference]`` with a threshold no score
  reaches: the cheap model answers everything. ``source_policy`` picks the source: the committed
  demo policy when it names pool members, else a policy calibrated from the collected arithmetic
  runs (``calibrate_command`` on ``complete_queries`` of them, priced as the gateway prices them).
* ``tiers_document(policy)``: the served tier's objective as a tiers file, for ``cascade
  recalibrate`` (the new policy is held to the objective the served one had).
* ``parse_metrics``/``metric_value``: a scrape read with prometheus_client's text parser.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from localpool.manifest import Manifest
from policies import Policy, build_policy, load_policy
from policies.scorers import SCORE_RANGES

TIER = "balanced"
# The starting tier's budget, as a multiple of the pool's summed mean costs per query: room for any
# route, so the recalibrated policy is limited by quality alone and never over budget.
BUDGET_FACTOR = 2.0
DEMO_POLICY = Path("policies/local-demo.json")
RUNS_FILES = (Path("data/local/arithmetic-runs.jsonl.gz"), Path("data/local/arithmetic-runs.jsonl"))


class StartingPolicyError(Exception):
    """No usable source for the starting policy (one line saying what is missing)."""


def names_members(policy: Policy, manifest: Manifest) -> bool:
    """Whether ``policy``'s models are pool models or members, at least one of them a member."""
    known = set(manifest.models) | set(manifest.members)
    return set(policy.models) <= known and any(m in manifest.members for m in policy.models)


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL runs table (``.jsonl`` or ``.jsonl.gz``)."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def complete_queries(source: Path, destination: Path) -> tuple[int, list[str]]:
    """Write the queries of ``source`` that have a row for every model seen (a table being
    collected ends with incomplete ones); returns their number and the models."""
    by_query: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in read_runs(source):
        by_query[str(row["query_id"])][str(row["model"])] = row
    models = sorted({m for rows in by_query.values() for m in rows})
    complete = [q for q, rows in by_query.items() if len(rows) == len(models)]
    with destination.open("w", encoding="utf-8") as out:
        for query in complete:
            for model in models:
                out.write(json.dumps(by_query[query][model]) + "\n")
    return len(complete), models


def price_sheet(manifest: Manifest, names: list[str]) -> dict[str, Any]:
    """The calibration price sheet of these pool models/members: the prices the gateway charges."""
    return {
        "models": {
            name: manifest.models[manifest.server_of(name)].price.model_dump(exclude_none=True)
            for name in names
        }
    }


def source_tiers(runs: Path) -> dict[str, Any]:
    """A tiers file for calibrating the source: the cheapest route halfway from the weakest model's
    quality to the strongest's, which puts a cheap scored stage in front of a stronger model."""
    by_model: dict[str, list[float]] = defaultdict(list)
    for row in read_runs(runs):
        by_model[str(row["model"])].append(float(row["correct"]))
    qualities = [sum(v) / len(v) for v in by_model.values()]
    target = (min(qualities) + max(qualities)) / 2
    return {"default_tier": TIER, "tiers": {TIER: {"min_quality": round(target, 4)}}}


def calibrate_command(runs: Path, tiers: Path, prices: Path, output: Path) -> list[str]:
    """``cascade calibrate`` of the source policy (the scorer the demo task uses)."""
    return [
        sys.executable,
        "-m",
        "cascade_cli.main",
        "calibrate",
        str(runs),
        "--tiers",
        str(tiers),
        "--prices",
        str(prices),
        "--scorer",
        "min_probability",
        "--top-k",
        "10",
        "-o",
        str(output),
    ]


def source_policy_file(repo_root: Path, manifest: Manifest) -> tuple[str, Path]:
    """``("demo", policy file)`` when the demo policy names pool members, else ``("runs", runs
    table)`` to calibrate from; StartingPolicyError when there is neither."""
    demo = repo_root / DEMO_POLICY
    if demo.is_file() and names_members(load_policy(demo), manifest):
        return "demo", demo
    for runs in RUNS_FILES:
        if (repo_root / runs).is_file():
            return "runs", repo_root / runs
    raise StartingPolicyError(
        f"no source for the starting policy: {DEMO_POLICY} does not name pool members and none of "
        f"{', '.join(map(str, RUNS_FILES))} exists (collect arithmetic runs with `cascade collect`)"
    )


def reference_model(policy: Policy) -> str:
    """The sampler's default reference: the model of highest calibrated quality (ties: costlier)."""
    return max(policy.models, key=lambda m: (policy.models[m].quality, policy.models[m].mean_cost_usd))


def never_escalate(scorer: str) -> float:
    """The lowest threshold a policy may carry for ``scorer``: every score is at or above it, so a
    stage with it never escalates (escalate iff score < threshold)."""
    low = SCORE_RANGES[scorer][0]
    assert math.isfinite(low), f"scorer {scorer} has no finite lowest score"
    return low


def never_escalating_policy(source: Policy) -> Policy:
    """The deliberately poor starting policy built from ``source`` (see the module docstring)."""
    distribution = source.score_distribution
    reference = reference_model(source)
    scored = [] if distribution is None else [m for m in distribution.models if m != reference]
    if distribution is None or not scored:
        raise StartingPolicyError(
            f"policy {source.policy_id} has no calibration score bins of a model other than the "
            f"reference {reference}: the drift metric would have nothing to compare with"
        )
    cheap = min(scored, key=lambda m: source.models[m].mean_cost_usd)
    bins = distribution.models[cheap]
    floor = never_escalate(source.scorer.name)
    budget = BUDGET_FACTOR * sum(stats.mean_cost_usd for stats in source.models.values())
    document = {
        "schema_version": 1,
        "scorer": source.scorer.model_dump(),
        "models": {name: stats.model_dump() for name, stats in source.models.items()},
        "default_tier": TIER,
        "tiers": {
            TIER: {
                "objective": {"max_cost_usd": budget},
                "routes": [{"weight": 1.0, "models": [cheap, reference], "thresholds": [floor]}],
                # What a route that never escalates does on the source's calibration data.
                "expected": {
                    "cost_usd": source.models[cheap].mean_cost_usd,
                    "quality": source.models[cheap].quality,
                    "escalation_rate": 0.0,
                },
            }
        },
        "on_missing_score": "accept",  # never escalates, not even an answer without logprobs
        # Every request reaches the first stage, so its tier bins are the model's own.
        "score_distribution": {
            "calibration_rows": distribution.calibration_rows,
            "models": {cheap: bins.model_dump()},
            "tiers": {TIER: {cheap: list(bins.proportions)}},
        },
    }
    return build_policy(document)


def tiers_document(policy: Policy) -> dict[str, Any]:
    """The served policy's objectives as a tiers file (``cascade recalibrate --tiers``)."""
    return {
        "default_tier": policy.default_tier,
        "tiers": {
            name: {k: v for k, v in tier.objective.model_dump().items() if v is not None}
            for name, tier in policy.tiers.items()
        },
    }


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (sample name, labels, value)."""
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def metric_value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``labels`` (0.0 when none; NaN if a
    matching sample is NaN)."""
    total = 0.0
    for sample_name, sample_labels, value in samples:
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items()):
            total += value
    return total


def has_sample(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> bool:
    """Whether a sample named ``name`` with these labels is exported at all."""
    return any(n == name and all(found.get(k) == v for k, v in labels.items()) for n, found, _ in samples)

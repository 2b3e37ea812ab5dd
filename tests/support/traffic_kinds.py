"""Judge-labelled traffic rows of several request kinds, for the traffic and recalibration tests.

``kind_traffic`` answers n queries of one kind with every model of a three-model pool; a confident
answer agrees with the reference (``large``) more often. The agreement of each model is the
caller's, so two kinds can differ (a small model good at tool calls and poor at text): a policy
that mixed their rows would show it in its model statistics.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from traffic.backends import open_store
from traffic.rows import TrafficRow

MODELS = ("small", "medium", "large")  # large is the reference: it agrees with itself
COST = {"small": 0.0001, "medium": 0.0004, "large": 0.002}
TEXT_AGREEMENT = {"small": 0.55, "medium": 0.75, "large": 1.0}
TOOL_AGREEMENT = {"small": 0.9, "medium": 0.95, "large": 1.0}
TIERS = {
    "default_tier": "balanced",
    "tiers": {"economy": {"max_cost_usd": 0.0006}, "balanced": {"max_cost_usd": 0.0012}},
}


def tiers_file(path: Path, tiers: dict[str, Any] | None = None) -> Path:
    """``tiers`` (default ``TIERS``) as a YAML file at ``path``."""
    import yaml

    path.write_text(yaml.safe_dump(tiers or TIERS))
    return path


def logprobs(confidence: float) -> list[dict[str, Any]]:
    """A one-token ``logprobs.content`` whose chosen token has probability ``confidence``."""
    rest = (1 - confidence) / 3
    alternatives = [{"token": t, "logprob": math.log(rest)} for t in "BCD"]
    chosen = {"token": "A", "logprob": math.log(confidence)}
    return [{**chosen, "top_logprobs": [chosen, *alternatives]}]


# (query index, model, agrees with the reference) -> the stored label
Labeller = Callable[[int, str, bool], float]


def kind_traffic(
    n: int,
    *,
    kind: str,
    agreement: Mapping[str, float],
    seed: int,
    prefix: str | None = None,
    label: Labeller | None = None,
    judge: str = "exact",
) -> list[TrafficRow]:
    """n queries of ``kind`` (ids ``<prefix>-<i>``, prefix default the kind), one row per model;
    ``label`` turns (query index, model, agrees) into the stored label (default: the agreement),
    ``judge`` names the judge of every model's row but the reference's."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    rows = []
    for q in range(n):
        for model in MODELS:
            agrees = rng.random() < agreement[model]
            confidence = rng.uniform(0.6, 0.99) if agrees else rng.uniform(0.3, 0.75)
            rows.append(
                TrafficRow(
                    query_id=f"{prefix or kind}-{q}",
                    model=model,
                    correct=label(q, model, agrees) if label else (1.0 if agrees else 0.0),
                    prompt_tokens=20,
                    completion_tokens=5,
                    cost_usd=COST[model],
                    logprobs=logprobs(round(confidence, 4)),
                    kind=kind,
                    timestamp=now - timedelta(seconds=n - q),
                    judge="reference" if model == "large" else judge,
                )
            )
    return rows


def two_kinds(n_text: int, n_tool: int, *, seed: int) -> list[TrafficRow]:
    """Text queries (``TEXT_AGREEMENT``) then tool-call queries (``TOOL_AGREEMENT``)."""
    return kind_traffic(n_text, kind="text", agreement=TEXT_AGREEMENT, seed=seed) + kind_traffic(
        n_tool, kind="tool_call", agreement=TOOL_AGREEMENT, seed=seed + 1
    )


def store_rows(url: str, rows: list[TrafficRow]) -> None:
    """Write rows to the traffic store at ``url`` (batches of 1,000 rows)."""

    async def write() -> None:
        store = open_store(url)
        try:
            for start in range(0, len(rows), 1000):
                await store.write_rows(rows[start : start + 1000])
        finally:
            await store.close()

    asyncio.run(write())

"""Black-box scores from the runs table's ``scorer_calls`` column (docs/contracts.md#runs-table).

Each row's recorded calls are scored with the functions the gateway applies live
(``policies.blackbox``), and their recorded cost becomes the row's *scoring cost*: what scoring
that model's answer costs, paid only where the model is a scored (non-final) stage of a route.

A model none of whose rows has calls for the scorer is *unscored*: it can answer alone or as the
last stage, never be scored (its score is NaN, and its queries are not dropped for it). A row of a
scored model whose call failed or gave nothing usable has a missing score, as live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from policies.blackbox import (
    BLACKBOX_SCORERS,
    EQUIVALENCES,
    SELF_REPORT_PROMPT,
    VERIFIER_PROMPT,
    Equivalent,
    consistency_score,
    self_report_score,
    verifier_score_from_position,
)

CALLS_COLUMN = "scorer_calls"
RESPONSE_COLUMN = "response"
DEFAULT_EQUIVALENCE = "exact"


class BlackboxScoresError(Exception):
    """The recorded calls cannot give the scorer asked for (one line; the loader adds file and row)."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.position = position


@dataclass(frozen=True)
class BlackboxOptions:
    """How to score: consistency's equivalence rule and how many of the recorded samples to use."""

    equivalence: str | None = None
    samples: int | None = None


@dataclass
class BlackboxScores:
    """Per row: score (NaN when missing), scoring cost (USD), and the policy's scorer settings."""

    score: np.ndarray
    scoring_cost: np.ndarray
    unscored_rows: np.ndarray
    settings: dict[str, Any] = field(default_factory=dict)
    top_k: int = 15


def _calls(value: Any, position: int) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise BlackboxScoresError("not valid JSON", position) from None
    if not isinstance(value, Mapping):
        raise BlackboxScoresError("expected a JSON object of recorded calls", position)
    return value


class _Settings:
    """The scorer settings the rows agree on (a model, prompt or temperature that varies is an error)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def same(self, name: str, value: Any, position: int) -> None:
        seen = self.values.setdefault(name, value)
        if seen != value:
            raise BlackboxScoresError(
                f"the recorded calls disagree on {name} ({seen!r}, then {value!r}); "
                "collect them the same way",
                position,
            )


def _equivalent(name: str) -> Equivalent:
    from traffic.judges.equivalence import equivalence

    return equivalence(name)


def blackbox_scores(
    scorer: str,
    calls: np.ndarray,
    calls_missing: np.ndarray,
    responses: np.ndarray | None,
    models: np.ndarray,
    options: BlackboxOptions,
) -> BlackboxScores:
    """Score every row from its recorded calls (see the module docstring).

    Args:
        scorer: one of ``policies.blackbox.BLACKBOX_SCORERS``.
        calls, calls_missing: the ``scorer_calls`` column and its missing mask, (r,).
        responses: the ``response`` column (the answers consistency compares), (r,); needed for
            ``consistency`` only.
        models: (r,) model name of each row.
        options: consistency's equivalence and sample count.
    """
    if scorer not in BLACKBOX_SCORERS:
        raise BlackboxScoresError(f"{scorer!r} is not a black-box scorer ({', '.join(BLACKBOX_SCORERS)})")
    if (options.equivalence is not None or options.samples is not None) and scorer != "consistency":
        raise BlackboxScoresError("--equivalence and --samples apply to the consistency scorer only")
    n = calls.shape[0]
    score = np.full(n, np.nan)
    cost = np.zeros(n)
    recorded = np.zeros(n, dtype=bool)
    settings = _Settings()
    top_k = 0
    one = _row_scorer(scorer, options, responses, settings)
    for position in np.flatnonzero(~calls_missing):
        entry = (_calls(calls[position], int(position)) or {}).get(scorer)
        if not isinstance(entry, Mapping):
            continue
        recorded[position] = True
        try:
            value, row_cost, alternatives = one(entry, int(position))
        except BlackboxScoresError as exc:
            exc.position = int(position) if exc.position is None else exc.position
            raise
        cost[position] = row_cost
        top_k = max(top_k, alternatives)
        if value is not None:
            score[position] = value
    # A model without any recorded call for this scorer is unscored: it may only answer last.
    names = np.unique(models)
    unscored_models = [name for name in names if not recorded[models == name].any()]
    if len(unscored_models) == len(names):
        raise BlackboxScoresError(
            f"no row has recorded '{scorer}' calls in column '{CALLS_COLUMN}' "
            f"(cascade collect --verifier/--consistency/--self-report records them)"
        )
    if scorer == "consistency":
        settings.values["equivalence"] = options.equivalence or DEFAULT_EQUIVALENCE
    return BlackboxScores(
        score=score,
        scoring_cost=cost,
        unscored_rows=np.isin(models, unscored_models),
        settings=_spec(scorer, settings.values),
        top_k=min(max(top_k, 2), 20) if scorer == "verifier" else 15,
    )


RowScorer = Callable[[Mapping[str, Any], int], tuple[float | None, float, int]]


def _row_scorer(
    scorer: str, options: BlackboxOptions, responses: np.ndarray | None, settings: _Settings
) -> RowScorer:
    """The function giving one row's ``(score, scoring cost, alternatives seen)`` from its calls."""
    if scorer == "verifier":

        def verifier(entry: Mapping[str, Any], position: int) -> tuple[float | None, float, int]:
            settings.same("model", entry.get("model"), position)
            settings.same("prompt", entry.get("prompt", VERIFIER_PROMPT), position)
            first = entry.get("first_token")
            alternatives = len(first.get("top_logprobs") or []) if isinstance(first, Mapping) else 0
            value = None if "error" in entry else verifier_score_from_position(first)
            return value, _cost(entry), alternatives

        return verifier
    if scorer == "self_report":

        def self_report(entry: Mapping[str, Any], position: int) -> tuple[float | None, float, int]:
            settings.same("prompt", entry.get("prompt", SELF_REPORT_PROMPT), position)
            value = None if "error" in entry else self_report_score(entry.get("text"))
            return value, _cost(entry), 0

        return self_report
    if responses is None:
        raise BlackboxScoresError(
            f"the consistency scorer compares samples with the '{RESPONSE_COLUMN}' column"
        )
    name = options.equivalence or DEFAULT_EQUIVALENCE
    if name not in EQUIVALENCES:
        raise BlackboxScoresError(f"unknown equivalence {name!r}; choose one of {', '.join(EQUIVALENCES)}")
    equivalent = _equivalent(name)

    def consistency(entry: Mapping[str, Any], position: int) -> tuple[float | None, float, int]:
        settings.same("temperature", entry.get("temperature"), position)
        samples = entry.get("samples")
        if "error" in entry or not isinstance(samples, list):
            return None, _cost(entry), 0
        wanted = options.samples or len(samples)
        if wanted > len(samples):
            raise BlackboxScoresError(
                f"--samples {wanted} but only {len(samples)} samples were recorded", position
            )
        settings.same("samples", wanted, position)
        # Samples are drawn alike, so k of n recorded cost k/n of what the n cost.
        row_cost = _cost(entry) * wanted / len(samples) if samples else 0.0
        answer = str(responses[position] or "")
        return consistency_score(answer, [str(s) for s in samples[:wanted]], equivalent), row_cost, 0

    return consistency


def _cost(entry: Mapping[str, Any]) -> float:
    value = entry.get("cost_usd", 0.0)
    if not isinstance(value, int | float) or value < 0 or value != value:
        raise BlackboxScoresError(f"cost_usd {value!r} is not a non-negative number")
    return float(value)


def _spec(scorer: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The policy's ``scorer`` fields for this scorer (policies.schema.ScorerSpec)."""
    if scorer == "verifier":
        return {"verifier": {"model": values.get("model"), "prompt": values.get("prompt", VERIFIER_PROMPT)}}
    if scorer == "self_report":
        return {"prompt": values.get("prompt", SELF_REPORT_PROMPT)}
    return {
        "samples": values.get("samples"),
        "temperature": values.get("temperature"),
        "equivalence": values.get("equivalence"),
    }

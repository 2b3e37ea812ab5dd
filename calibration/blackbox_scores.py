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

from policies.blackbox import EQUIVALENCES, Equivalent
from policies.scorers import BLACKBOX_SCORERS, Calls, blackbox_calls

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
        scorer: one of ``policies.scorers.BLACKBOX_SCORERS``.
        calls, calls_missing: the ``scorer_calls`` column and its missing mask, (r,).
        responses: the ``response`` column (the answers a repeated scorer's samples are compared
            with), (r,); needed for a repeated scorer (consistency) only.
        models: (r,) model name of each row.
        options: a repeated scorer's equivalence and sample count.
    """
    definition = blackbox_calls(scorer)
    if definition is None:
        raise BlackboxScoresError(f"{scorer!r} is not a black-box scorer ({', '.join(BLACKBOX_SCORERS)})")
    if (options.equivalence is not None or options.samples is not None) and not definition.repeated:
        repeated = [name for name, c in _registered() if c.repeated]
        raise BlackboxScoresError(
            f"--equivalence and --samples apply to the {' and '.join(repeated)} scorer only"
        )
    n = calls.shape[0]
    score = np.full(n, np.nan)
    cost = np.zeros(n)
    recorded = np.zeros(n, dtype=bool)
    settings = _Settings()
    top_k = 0
    one = _row_scorer(scorer, definition, options, responses, settings)
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
    unscored_models = _unscored_models(scorer, models, recorded)
    if definition.repeated:
        settings.values["equivalence"] = options.equivalence or DEFAULT_EQUIVALENCE
    return BlackboxScores(
        score=score,
        scoring_cost=cost,
        unscored_rows=np.isin(models, unscored_models),
        settings=definition.policy_fields(settings.values),
        top_k=min(max(top_k, 2), 20) if definition.alternatives is not None else 15,
    )


def _unscored_models(scorer: str, models: np.ndarray, recorded: np.ndarray) -> list[str]:
    """The models without any recorded call for ``scorer``: unscored, they may only answer last
    (BlackboxScoresError when no model has one)."""
    names = np.unique(models)
    unscored = [str(name) for name in names if not recorded[models == name].any()]
    if len(unscored) == len(names):
        flags = "/".join(c.collect_flag.split()[0] for _, c in _registered())
        raise BlackboxScoresError(
            f"no row has recorded '{scorer}' calls in column '{CALLS_COLUMN}' "
            f"(cascade collect {flags} records them)"
        )
    return unscored


def _registered() -> list[tuple[str, Calls]]:
    """(name, calls) of every black-box scorer, in the registry's order."""
    return [(name, calls) for name in BLACKBOX_SCORERS if (calls := blackbox_calls(name)) is not None]


RowScorer = Callable[[Mapping[str, Any], int], tuple[float | None, float, int]]


def _row_scorer(
    scorer: str,
    definition: Calls,
    options: BlackboxOptions,
    responses: np.ndarray | None,
    settings: _Settings,
) -> RowScorer:
    """The function giving one row's ``(score, scoring cost, alternatives seen)`` from its calls.

    The rows must agree on the settings the calls were made with (``Calls.recorded_settings``); a
    repeated scorer scores the first ``options.samples`` of its recorded samples against the row's
    ``response`` by the equivalence, at k/n of the recorded cost (samples are drawn alike)."""
    equivalent: Equivalent | None = None
    if definition.repeated:
        if responses is None:
            raise BlackboxScoresError(
                f"the {scorer} scorer compares samples with the '{RESPONSE_COLUMN}' column"
            )
        name = options.equivalence or DEFAULT_EQUIVALENCE
        if name not in EQUIVALENCES:
            raise BlackboxScoresError(
                f"unknown equivalence {name!r}; choose one of {', '.join(EQUIVALENCES)}"
            )
        equivalent = _equivalent(name)

    def row(entry: Mapping[str, Any], position: int) -> tuple[float | None, float, int]:
        for key, default in definition.recorded_settings.items():
            settings.same(key, entry.get(key, default), position)
        reading = entry.get(definition.recorded_as)
        alternatives = 0 if definition.alternatives is None else definition.alternatives(reading)
        row_cost = _cost(entry)
        if not definition.repeated:
            value = None if "error" in entry else definition.score("", [reading], None)
            return value, row_cost, alternatives
        if "error" in entry or not isinstance(reading, list):
            return None, row_cost, alternatives
        wanted = options.samples or len(reading)
        if wanted > len(reading):
            raise BlackboxScoresError(
                f"--samples {wanted} but only {len(reading)} samples were recorded", position
            )
        settings.same("samples", wanted, position)
        row_cost = row_cost * wanted / len(reading) if reading else 0.0
        answer = str(responses[position] or "") if responses is not None else ""
        return definition.score(answer, reading[:wanted], equivalent), row_cost, alternatives

    return row


def _cost(entry: Mapping[str, Any]) -> float:
    value = entry.get("cost_usd", 0.0)
    if not isinstance(value, int | float) or value < 0 or value != value:
        raise BlackboxScoresError(f"cost_usd {value!r} is not a non-negative number")
    return float(value)

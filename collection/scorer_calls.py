"""The extra calls of the black-box scorers, recorded per row in the runs table's ``scorer_calls``.

``cascade collect --verifier MODEL --consistency K --self-report`` makes, after each answer, the
calls the gateway would make to score it (each scorer's ``policies.scorers.Calls`` builds every
request body and reads every reply, the same functions as live), and records per scorer what its
score needs (docs/contracts.md#runs-table), with the calls' cost (``money.charges.call_charge``
at the called model's price, as every upstream call), token counts and latencies. A call that fails
after its retries records ``error`` instead, and the score is then missing, as it would be live.
With ``--answers-from RUNS`` the answer scored is the one already recorded in RUNS for that (query,
model), so the scores line up with the rows the runs were calibrated on.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from collection.targets import Target
from collection.upstream_call import CallError, call_model
from money.charges import call_charge
from policies.scorers import Calls, CallSettings, blackbox_calls


@dataclass(frozen=True)
class ScorerCallsOptions:
    """Which black-box scorers' calls to make after each answer (none: no ``scorer_calls``).

    ``scorers``: the settings of each scorer's calls by scorer name (``policies.scorers.REGISTRY``),
    made in this order; ``targets``: the configured models the scorers' own calls go to (the
    verifier's), by name; ``models``: whose answers get the calls (None: every collected model).
    """

    scorers: Mapping[str, CallSettings] = field(default_factory=dict)
    targets: Mapping[str, Target] = field(default_factory=dict)
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        for name, settings in self.scorers.items():
            calls = blackbox_calls(name)
            if calls is None:
                raise ValueError(f"{name!r} is not a black-box scorer")
            if calls.own_model and settings.model not in self.targets:
                raise ValueError(f"scorer {name} calls model {settings.model!r}, which is not a target")

    def wanted(self, model: str) -> bool:
        """Whether the answers of ``model`` are to be scored."""
        return bool(self.scorers) and (self.models is None or model in self.models)


class ScorerCallError(Exception):
    """An extra call failed after its retries (recorded as the scorer's ``error``)."""


async def post_chat(
    client: httpx.AsyncClient, target: Target, body: dict[str, Any], retries: int
) -> tuple[dict[str, Any], float, bytes]:
    """One chat completion to ``target`` with the collector's retries; (reply, latency ms, bytes sent)."""
    sent = orjson.dumps(body)
    try:
        reply, latency_ms = await call_model(client, target, body, retries)
    except CallError as exc:
        raise ScorerCallError(str(exc)) from exc
    return reply, latency_ms, sent


async def record_calls(
    client: httpx.AsyncClient,
    calls: Calls,
    callee: Target,
    settings: CallSettings,
    stage_body: dict[str, Any],
    answer: str,
    retries: int,
) -> dict[str, Any]:
    """One scorer's calls on one answer, one after the other, as its ``scorer_calls`` entry.

    The entry holds the settings the calls were made with (``Calls.recorded_settings``), what the
    replies give the score (``Calls.reading``, under ``Calls.recorded_as``: a list for a repeated
    scorer), their charge by ``call_charge`` at the called model's price, token counts and latencies
    (a list for a repeated scorer); or ``error`` when a call failed after its retries, with the cost
    of the calls made before it.
    """
    body = calls.body(settings, stage_body, answer, callee.model, callee.request_defaults)
    recorded = {key: getattr(settings, key) for key in calls.recorded_settings}
    readings: list[Any] = []
    latencies: list[float] = []
    cost = 0.0
    prompt_tokens = completion_tokens = 0
    for _ in range(calls.calls(settings)):
        try:
            reply, latency_ms, sent = await post_chat(client, callee, body, retries)
        except ScorerCallError as exc:
            return {**recorded, "error": str(exc), "cost_usd": cost}
        charge = call_charge(callee.price, reply.get("usage"), sent, answer=reply)
        cost += charge.usd
        prompt_tokens += charge.prompt_tokens
        completion_tokens += charge.completion_tokens
        readings.append(calls.reading(reply))
        latencies.append(round(latency_ms, 1))
    return {
        **recorded,
        calls.recorded_as: readings if calls.repeated else readings[0],
        "cost_usd": cost,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "latency_ms": latencies if calls.repeated else latencies[0],
    }


async def scorer_calls(
    client: httpx.AsyncClient,
    target: Target,
    stage_body: dict[str, Any],
    answer: str,
    options: ScorerCallsOptions,
    retries: int,
) -> dict[str, Any]:
    """Every requested scorer's calls on one answer (one call in flight at a time per answer)."""
    recorded: dict[str, Any] = {}
    for name, settings in options.scorers.items():
        calls = blackbox_calls(name)
        assert calls is not None  # checked by ScorerCallsOptions
        callee = options.targets[settings.model] if calls.own_model and settings.model else target
        recorded[name] = await record_calls(client, calls, callee, settings, stage_body, answer, retries)
    return recorded


def recorded_rows(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of a runs table in JSONL (``.jsonl`` or ``.jsonl.gz``) by (query_id, model)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                rows[(str(row["query_id"]), str(row["model"]))] = row
    return rows

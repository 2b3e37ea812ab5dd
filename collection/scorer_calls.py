"""The extra calls of the black-box scorers, recorded per row in the runs table's ``scorer_calls``.

``cascade collect --verifier MODEL --consistency K --self-report`` makes, after each answer, the
calls the gateway would make to score it (``policies.blackbox`` builds every request body, the same
functions as live), and records what each score needs (docs/contracts.md#runs-table):

* ``verifier``: the first generated token with its alternatives (``first_token``), enough for
  ``verifier_score_from_position``;
* ``consistency``: the k sample texts and the temperature;
* ``self_report``: the reply text;

each with the calls' cost (``money.charges.call_charge`` at the called model's price, as every
upstream call), token counts and latencies. A call that fails after its retries records ``error``
instead, and the score is then missing, as it would be live. With ``--answers-from RUNS`` the
answer scored is the one already recorded in RUNS for that (query, model), so the scores line up
with the rows the runs were calibrated on.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from collection.targets import Target
from collection.upstream_call import CallError, call_model
from money.charges import call_charge
from policies.blackbox import (
    SELF_REPORT_PROMPT,
    VERIFIER_PROMPT,
    answer_text,
    first_position,
    sample_request,
    self_report_request,
    verifier_request,
)
from policies.request_defaults import merge_request_defaults


@dataclass(frozen=True)
class ScorerCallsOptions:
    """Which black-box scorers' calls to make after each answer (none: no ``scorer_calls``)."""

    verifier: Target | None = None
    verifier_prompt: str = VERIFIER_PROMPT
    verifier_top_logprobs: int = 10
    consistency: int = 0
    consistency_temperature: float = 0.7
    self_report: bool = False
    self_report_prompt: str = SELF_REPORT_PROMPT
    # Models whose answers get the calls (None: every collected model).
    models: frozenset[str] | None = None

    def wanted(self, model: str) -> bool:
        """Whether the answers of ``model`` are to be scored."""
        active = self.verifier is not None or self.consistency > 0 or self.self_report
        return active and (self.models is None or model in self.models)


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


def _charge(target: Target, reply: dict[str, Any], sent: bytes) -> dict[str, Any]:
    charge = call_charge(target.price, reply.get("usage"), sent, answer=reply)
    return {
        "cost_usd": charge.usd,
        "prompt_tokens": charge.prompt_tokens,
        "completion_tokens": charge.completion_tokens,
    }


async def verifier_call(
    client: httpx.AsyncClient,
    stage_body: dict[str, Any],
    answer: str,
    options: ScorerCallsOptions,
    retries: int,
) -> dict[str, Any]:
    """The verifier's call on one answer: its first token's alternatives, cost and latency."""
    verifier = options.verifier
    assert verifier is not None
    body = verifier_request(
        stage_body.get("messages", []),
        answer,
        model=verifier.model,
        prompt=options.verifier_prompt,
        top_logprobs=options.verifier_top_logprobs,
    )
    # Sent like any call to a configured model: the client's fields over its request defaults.
    body = merge_request_defaults(body, verifier.request_defaults)
    try:
        reply, latency_ms, sent = await post_chat(client, verifier, body, retries)
    except ScorerCallError as exc:
        return {"model": verifier.name, "error": str(exc)}
    return {
        "model": verifier.name,
        "prompt": options.verifier_prompt,
        "first_token": first_position(reply),
        **_charge(verifier, reply, sent),
        "latency_ms": round(latency_ms, 1),
    }


async def consistency_calls(
    client: httpx.AsyncClient,
    target: Target,
    stage_body: dict[str, Any],
    options: ScorerCallsOptions,
    retries: int,
) -> dict[str, Any]:
    """k samples of the stage at the temperature, one after the other; their texts, cost, latencies."""
    body = sample_request(stage_body, options.consistency_temperature)
    samples: list[str] = []
    latencies: list[float] = []
    cost = 0.0
    prompt_tokens = completion_tokens = 0
    for _ in range(options.consistency):
        try:
            reply, latency_ms, sent = await post_chat(client, target, body, retries)
        except ScorerCallError as exc:
            return {"temperature": options.consistency_temperature, "error": str(exc), "cost_usd": cost}
        charged = _charge(target, reply, sent)
        cost += charged["cost_usd"]
        prompt_tokens += charged["prompt_tokens"]
        completion_tokens += charged["completion_tokens"]
        samples.append(answer_text(reply) or "")
        latencies.append(round(latency_ms, 1))
    return {
        "temperature": options.consistency_temperature,
        "samples": samples,
        "cost_usd": cost,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "latency_ms": latencies,
    }


async def self_report_call(
    client: httpx.AsyncClient,
    target: Target,
    stage_body: dict[str, Any],
    answer: str,
    options: ScorerCallsOptions,
    retries: int,
) -> dict[str, Any]:
    """The follow-up call asking the stage model its confidence: the reply text, cost, latency."""
    body = self_report_request(stage_body, answer, prompt=options.self_report_prompt)
    try:
        reply, latency_ms, sent = await post_chat(client, target, body, retries)
    except ScorerCallError as exc:
        return {"error": str(exc)}
    return {
        "prompt": options.self_report_prompt,
        "text": answer_text(reply),
        **_charge(target, reply, sent),
        "latency_ms": round(latency_ms, 1),
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
    calls: dict[str, Any] = {}
    if options.verifier is not None:
        calls["verifier"] = await verifier_call(client, stage_body, answer, options, retries)
    if options.consistency > 0:
        calls["consistency"] = await consistency_calls(client, target, stage_body, options, retries)
    if options.self_report:
        calls["self_report"] = await self_report_call(client, target, stage_body, answer, options, retries)
    return calls


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

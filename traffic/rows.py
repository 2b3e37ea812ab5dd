"""One stored traffic row: a runs-table row (docs/contracts.md#runs-table) plus where it came from.

A row is one (query, model) answer of a sampled request. ``correct`` is the judge's label
(agreement with the reference model's answer) or ``None`` when it is missing: the model's call
failed or the judge could not decide. A missing label is never a wrong answer: the export treats
the query as incomplete. ``kind`` is the request's kind (``policies.tool_calls.request_kind``), so
that calibration keeps each kind's rows apart; a row stored before the column existed reads as
``text``, as a runs table without the column does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import orjson

from policies.tool_calls import REQUEST_KINDS

# Every column, in the order of the exported table.
COLUMNS = (
    "query_id",
    "model",
    "correct",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "logprobs",
    "score",
    "latency_ms",
    "dataset",
    "kind",
    "timestamp",
    "tier",
    "policy_id",
    "replica",
    "judge",
    "route",
    "prompt",
    "response",
)
# The keys of a row's ``route``: the feature set's name, its vector, how the request was routed
# (``gateway.routing.routed_tiers``; None on a cascade tier), the router's probability behind it and the
# models of the route taken (None on a cascade tier).
ROUTE_KEYS = ("features", "values", "mechanism", "router_probability", "models")
# The text columns a `where` filter may name (equality, as with `cascade calibrate --where`).
FILTER_COLUMNS = ("query_id", "model", "dataset", "kind", "tier", "policy_id", "replica", "judge")
# The kind of a row that does not say (written before the column existed).
DEFAULT_KIND = "text"


class RowError(ValueError):
    """A row that cannot be stored (one-line message)."""


@dataclass(frozen=True)
class TrafficRow:
    """One model's answer to one sampled query.

    Attributes:
        query_id: the same id for the same query across models.
        model: configured model name.
        correct: judge label in [0, 1]; None when missing (failed call, undecided judge).
        prompt_tokens, completion_tokens: the upstream's usage.
        cost_usd: realized cost of the call.
        logprobs: OpenAI ``choices[0].logprobs.content`` (None if the stage is not scored).
        score: the policy scorer's value for this answer, if computed (a non-finite one is None).
        latency_ms: upstream latency of the call.
        dataset: optional stratum (e.g. the client or the route) for stratified splits.
        kind: the request's kind, ``text``, ``tool_call`` or ``structured_output``.
        timestamp: when the answer was recorded (timezone-aware, UTC).
        tier: the tier label of the request; policy_id: the serving policy; replica: the writer.
        judge: which judge produced ``correct`` (e.g. ``exact``, ``llm``, ``reference``).
        route: the request's router inputs and decision when the serving policy has a router
            (``{"features", "values", "mechanism", "router_probability", "models"}``, ``ROUTE_KEYS``): what
            ``cascade recalibrate`` refits the router on. None otherwise.
        prompt, response: the texts, stored only when ``log_text`` is on.
    """

    query_id: str
    model: str
    correct: float | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    logprobs: list[dict[str, Any]] | None = None
    score: float | None = None
    latency_ms: float | None = None
    dataset: str | None = None
    kind: str = DEFAULT_KIND
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))
    tier: str | None = None
    policy_id: str | None = None
    replica: str | None = None
    judge: str | None = None
    route: dict[str, Any] | None = None
    prompt: str | None = None
    response: str | None = None

    def __post_init__(self) -> None:
        if not self.query_id or not self.model:
            raise RowError("a traffic row needs a query_id and a model")
        if self.correct is not None and not 0.0 <= self.correct <= 1.0:
            raise RowError(f"correct {self.correct!r} outside [0, 1] ({self.query_id}, {self.model})")
        if self.cost_usd < 0 or self.prompt_tokens < 0 or self.completion_tokens < 0:
            raise RowError(f"negative cost or token count ({self.query_id}, {self.model})")
        if self.score is not None and not math.isfinite(self.score):
            object.__setattr__(self, "score", None)  # no score, in every store alike (JSON has no NaN)
        if self.kind not in REQUEST_KINDS:
            raise RowError(
                f"kind {self.kind!r} is not a request kind ({', '.join(REQUEST_KINDS)}) "
                f"({self.query_id}, {self.model})"
            )
        if self.route is not None and not (
            isinstance(self.route, dict)
            and isinstance(self.route.get("features"), str)
            and isinstance(self.route.get("values"), list)
        ):
            raise RowError(
                f"route must be an object with features and values ({self.query_id}, {self.model})"
            )
        if self.timestamp.tzinfo is None:
            raise RowError(f"timestamp without a timezone ({self.query_id}, {self.model})")

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (timestamp as ISO-8601 UTC), in ``COLUMNS`` order."""
        # Shallow on purpose: ``asdict`` deep-copies the logprobs (hundreds of small dicts per row),
        # which made serializing a sampled row several times dearer than encoding it.
        record = {name: getattr(self, name) for name in COLUMNS}
        record["timestamp"] = self.timestamp.astimezone(UTC).isoformat()
        return record

    def to_json_line(self) -> bytes:
        """``to_record`` as one compact UTF-8 JSON line (``\\n`` included), ``query_id`` first."""
        return json_bytes(self.to_record()) + b"\n"

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrafficRow:
        """The inverse of ``to_record``; unknown keys are ignored (a newer writer's columns), and a
        missing or null ``kind`` (an older writer's row) is ``text``."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in known}
        if values.get("kind") is None:
            values["kind"] = DEFAULT_KIND
        stamp = values.get("timestamp")
        if isinstance(stamp, str):
            values["timestamp"] = datetime.fromisoformat(stamp)
        return cls(**values)


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON of a row's values.

    orjson: encoding a row's logprobs (hundreds of small dicts) with the standard library took about
    18x as long, and it was most of what a sampled request cost the gateway (docs/benchmarks.md).
    A non-finite float becomes ``null`` (a missing value; standard JSON has no NaN). What orjson
    refuses (an integer past 64 bits) falls back to the standard library.
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

"""What an API endpoint (gateway.api.endpoint) records of each request once it is answered and
settled: its metrics and its one JSON log line (``RequestLog.record``), and what the console's
record of it is built from (``RequestLog.served``, for gateway.records)."""

from __future__ import annotations

import time
from typing import Any

from gateway.api.request_state import RequestState
from gateway.assembly.runtime import Gateway
from gateway.records.record import ServedRequest
from gateway.wire.logs import log_fields


class RequestLog:
    """The metrics and log lines of one endpoint's requests (``endpoint``: the API edge's name, a
    label of every metric and line; ``path``: the route it serves)."""

    def __init__(self, gateway: Gateway, endpoint: str, path: str) -> None:
        self.gateway = gateway
        self.endpoint = endpoint
        self.path = path
        # The metric children of a request's label set (tier, outcome, kind): few sets, as labels are.
        self._metric_children: dict[tuple[str, str, str], tuple[Any, Any, Any, Any]] = {}

    def served(self, request: RequestState) -> ServedRequest:
        """What the console's record of ``request`` is built from (gateway.records.record)."""
        return ServedRequest(
            request_id=request.request_id,
            api=self.endpoint,
            path=self.path,
            status=request.status,
            tier=request.tier,
            kind=request.plan.kind if request.plan is not None else "none",
            outcome=request.outcome,
            key_id=request.key_id,
            duration_s=time.perf_counter() - request.started,
            facts=request.facts,
            parsed=request.parsed,
            error=request.error,
            headers=request.exchange.headers,
            worst_case_usd=request.worst_case_usd,
            first_byte_s=request.first_byte_s,
            answer=request.answer,
        )

    def _request_metrics(self, tier: str, outcome: str, kind: str) -> tuple[Any, Any, Any, Any]:
        """The children a request of ``tier``, ``outcome`` and ``kind`` updates (its count, by kind,
        duration and overhead), found once per label set (GatewayMetrics.child)."""
        key = (tier, outcome, kind)
        found = self._metric_children.get(key)
        if found is None:
            metrics, endpoint = self.gateway.metrics, self.endpoint
            found = self._metric_children[key] = (
                metrics.child(metrics.requests, tier, outcome, endpoint),
                metrics.child(metrics.requests_by_kind, tier, kind),
                metrics.child(metrics.request_duration, tier, endpoint),
                metrics.child(metrics.overhead, endpoint),
            )
        return found

    def record(self, request: RequestState) -> None:
        """Metrics and the request's log line (with the worst case reserved against, once known)."""
        metrics = self.gateway.metrics
        tier, outcome, facts, parsed = request.tier, request.outcome, request.facts, request.parsed
        duration = time.perf_counter() - request.started
        upstream_s = facts.upstream_s if facts else 0.0
        endpoint = self.endpoint
        plan = request.plan
        kind = plan.kind if plan is not None else "none"
        requests, by_kind, request_duration, overhead = self._request_metrics(tier, outcome, kind)
        requests.inc()
        by_kind.inc()
        if facts is not None and facts.models_called and plan is not None and plan.policy is not None:
            metrics.shift_alarms.observe(
                plan.policy.policy_id,
                tier,
                kind,
                outcome,
                facts.models_called[0],
                facts.score,
                facts.escalated,
            )
        request_duration.observe(duration)
        overhead.observe(max(0.0, duration - upstream_s))
        if request.first_byte_s is not None:
            metrics.child(metrics.first_token, tier, outcome).observe(request.first_byte_s)
        fields: dict[str, Any] = {
            "request_id": request.request_id,
            "endpoint": endpoint,
            "path": self.path,
            "status": request.status,
            "tier": tier,
            "kind": kind,
            "outcome": outcome,
            "duration_ms": round(duration * 1000, 3),
            "overhead_ms": round((duration - upstream_s) * 1000, 3),
        }
        if parsed is not None:
            fields["model"] = parsed.model[:100]
            fields["stream"] = parsed.stream
            if self.gateway.logs.log_prompts:
                fields["prompt"] = parsed.body.get("messages" if parsed.api == "chat" else "prompt")
        if facts is not None:
            facts.log_fields(request.worst_case_usd, upstream_s, self.gateway.logs.log_prompts, fields)
        if request.first_byte_s is not None:
            fields["first_byte_ms"] = round(request.first_byte_s * 1000, 3)
        log_fields("request", fields)

"""The one reader of a response's decision (policies/response_decision.py): headers, the SSE comment
lines of a stream started early, and the last chunk's ``cascade`` object, each later one winning."""

from __future__ import annotations

from policies.response_decision import DecisionReader, ResponseDecision

HEADERS = {
    "Content-Type": "application/json",
    "X-Cascade-Tier": "balanced",
    "x-cascade-policy": "6908ac06a5f542e1",
    "x-cascade-model": "small",
    "x-cascade-models-called": "small",
    "x-cascade-escalated": "false",
    "x-cascade-escalation-reason": "none",
    "x-cascade-score": "0.93",
    "x-cascade-threshold": "0.5",
    "x-cascade-cost-usd": "2e-06",
    "x-cascade-overhead-ms": "1.250",
    "x-cascade-over-budget": "true",
}


def test_a_responses_headers_are_its_decision_with_none_read_as_absent() -> None:
    decision = DecisionReader(HEADERS).decision()
    assert decision == ResponseDecision(
        tier="balanced",
        policy_id="6908ac06a5f542e1",
        model="small",
        models_called=("small",),
        escalated=False,
        score=0.93,
        threshold=0.5,
        cost_usd=2e-06,
        overhead_ms=1.25,
        over_budget=True,
    )


def test_an_early_started_streams_comment_lines_carry_the_decision_its_headers_do_not() -> None:
    reader = DecisionReader({"content-type": "text/event-stream"})
    assert not reader.comment(": keep-alive")  # the keep-alive is no decision
    assert reader.comment(": x-cascade-policy: 6908ac06a5f542e1")
    assert reader.comment(": x-cascade-escalated: true")
    assert reader.comment(": x-cascade-commit-tokens: 12")
    assert not reader.comment('data: {"choices": []}')
    decision = reader.decision()
    assert (decision.policy_id, decision.escalated, decision.commit_tokens) == ("6908ac06a5f542e1", True, 12)
    assert not decision.final and decision.cost_usd is None


def test_the_last_chunks_cascade_object_is_the_final_word() -> None:
    reader = DecisionReader(HEADERS)
    reader.chunk({"choices": [{"delta": {"content": "Paris"}}]})  # no cascade object: nothing read
    assert not reader.decision().final
    facts = {
        "tier": "balanced",
        "policy": "6908ac06a5f542e1",
        "model": "large",
        "models_called": ["small", "large"],
        "escalated": True,
        "escalation_reasons": ["low_score"],
        "score": 0.2,
        "threshold": 0.5,
        "cost_usd": 0.001002,
        "overhead_ms": 3.5,
        "degraded": False,
        "mechanism": "routed",
        "router_probability": 0.8,
        "commit": {"rule": "prefix", "tokens": 8},
    }
    reader.chunk({"choices": [], "cascade": facts})
    decision = reader.decision()
    assert decision.final and decision.model == "large" and decision.models_called == ("small", "large")
    assert (decision.escalated, decision.escalation_reasons, decision.cost_usd) == (
        True,
        ("low_score",),
        0.001002,
    )
    assert (decision.mechanism, decision.router_probability) == ("routed", 0.8)
    assert (decision.commit, decision.commit_tokens) == ("prefix", 8)
    assert decision.over_budget  # a header the cascade object does not repeat is kept

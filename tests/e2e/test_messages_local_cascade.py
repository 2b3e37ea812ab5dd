"""End to end: streamed Anthropic Messages requests (the anthropic SDK) through `cascade serve` in
front of two real llama-server models, over `cascade/balanced`.

The pool and the cheap model's own scores are the session's, which test_local_cascade uses too
(``cascade_pool``, ``cheap_scores``: tests/e2e/conftest.py; the same questions, asked the same way:
a Messages request with one user turn, `max_tokens` 8 and temperature 0 translates to that very
chat request). The policy's threshold splits the questions, so some answers are accepted and the
others escalated; each decision must show in the headers, the request's log line and the metrics,
all labelled as the `messages` endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from cascade_metrics import metric_families, requests_by_outcome
from local_cascade_support import CHEAP, QUESTIONS, STRONG, threshold_of, two_model_policy

from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.manifest import Manifest
from policies import save_policy
from tests.support.gateway_logs import request_lines
from tests.support.local_demo import serving_gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def messages_gateway(
    cascade_pool: Manifest, cheap_scores: dict[str, float], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """`cascade serve` over both models with a threshold between the cheap scores; (url, its log)."""
    threshold, _ = threshold_of(cheap_scores)
    work = tmp_path_factory.mktemp("messages-gateway")
    policy_path = work / "policy.json"
    save_policy(two_model_policy(threshold), policy_path)
    config = pool_gateway_config(cascade_pool, [CHEAP, STRONG], policy_path)
    config["logging"] = {"level": "info"}
    config_path = write_gateway_config(work / "gateway.yaml", config)
    log = work / "gateway.log"
    with serving_gateway(config_path, log) as url:
        yield url, log


def test_streamed_messages_are_accepted_or_escalated_with_the_decision_in_headers_logs_and_metrics(
    messages_gateway: tuple[str, Path], cheap_scores: dict[str, float]
) -> None:
    url, log = messages_gateway
    threshold, gap = threshold_of(cheap_scores)
    assert gap > 0.02, f"the cheap model's scores do not separate: {cheap_scores}"
    client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120)
    outcomes: dict[str, str] = {}
    request_ids: dict[str, str] = {}
    for question in QUESTIONS:
        with client.messages.stream(
            model="cascade/balanced",
            max_tokens=8,
            extra_body={"temperature": 0},  # no longer a named parameter of the SDK; still served
            messages=[{"role": "user", "content": question}],
        ) as stream:
            headers = stream.response.headers
            kinds = [event.type for event in stream]
            final = stream.get_final_message()
        escalated = headers["x-cascade-escalated"] == "true"
        score = float(headers["x-cascade-score"])
        assert escalated == (score < threshold)  # the decision rule, on the gateway's own score
        assert score == pytest.approx(cheap_scores[question], abs=0.05)  # the same request as chat's
        assert headers["x-cascade-model"] == (STRONG if escalated else CHEAP) == final.model
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
        assert final.content and final.content[0].type == "text" and final.content[0].text
        assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0
        outcomes[question] = "escalated" if escalated else "accepted"
        request_ids[question] = headers["x-request-id"]
    assert set(outcomes.values()) == {"accepted", "escalated"}, outcomes

    lines = request_lines(log, request_ids.values())
    for question, outcome in outcomes.items():
        line = lines[request_ids[question]]
        assert (line["endpoint"], line["path"], line["tier"], line["outcome"]) == (
            "messages",
            "/v1/messages",
            "balanced",
            outcome,
        )
        assert line["escalated"] is (outcome == "escalated") and line["stream"] is True
        assert line["models_called"] == ([CHEAP, STRONG] if outcome == "escalated" else [CHEAP])

    requests = requests_by_outcome(metric_families(url), "messages", tier="balanced")
    assert requests == {
        "accepted": list(outcomes.values()).count("accepted"),
        "escalated": list(outcomes.values()).count("escalated"),
    }

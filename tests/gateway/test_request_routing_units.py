"""Units of the request path without a server: parsing, routing, upstream bodies, Retry-After."""

from __future__ import annotations

import email.utils
import random
import time

import orjson
import pytest

from gateway.config.settings import Settings
from gateway.routing.tier_choice import RoutePlanner
from gateway.stages.bodies import client_body, upstream_body
from gateway.upstream.failure import _parse_retry_after
from gateway.wire.errors import (
    BadRequestError,
    ModelNotFoundError,
    PolicyUnavailableError,
    UnknownTierRequestError,
)
from gateway.wire.requests import parse_request
from policies import build_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT, model_configs

SETTINGS = Settings.from_mapping({"models": model_configs("http://127.0.0.1:1/v1"), "policy": "p.json"})
POLICY = build_policy(POLICY_DOCUMENT)


def _request(**fields):
    body = {"model": "cascade", "messages": [{"role": "user", "content": "hi"}], **fields}
    return parse_request(orjson.dumps(body), "chat")


def test_parse_keeps_the_body_and_reads_the_fields_it_acts_on() -> None:
    parsed = _request(stream=True, logprobs=True, top_logprobs=3, stream_options={"include_usage": True}, x=1)
    assert parsed.stream and parsed.wants_logprobs and parsed.include_usage and parsed.n == 1
    assert parsed.body["x"] == 1
    legacy = parse_request(b'{"model": "small", "prompt": ["a", "b"], "logprobs": 2}', "completions")
    assert legacy.wants_logprobs and legacy.api == "completions"


def test_routes_by_header_alias_and_model_in_priority_order() -> None:
    router = RoutePlanner(SETTINGS.models, random.Random(0))
    assert router.plan(_request(model="small"), POLICY, "0.0005", "direct").tier == "budget"
    assert router.plan(_request(model="cascade/chain"), POLICY, None, "direct").tier == "direct"
    assert router.plan(_request(model="cascade/chain"), POLICY).route.models == ["small", "medium", "large"]
    assert router.plan(_request(model="cascade"), POLICY).tier == "balanced"
    plan = router.plan(_request(model="small"), POLICY)
    assert (plan.tier, plan.model, plan.route) == ("passthrough", "small", None)
    assert router.plan(_request(model="small"), None).model == "small"  # passthrough needs no policy


def test_routing_errors() -> None:
    router = RoutePlanner(SETTINGS.models)
    with pytest.raises(ModelNotFoundError):
        router.plan(_request(model="gpt-x"), POLICY)
    with pytest.raises(UnknownTierRequestError):
        router.plan(_request(model="cascade/none"), POLICY)
    with pytest.raises(PolicyUnavailableError, match="file gone"):
        router.plan(_request(), None, no_policy_reason="file gone")
    with pytest.raises(BadRequestError):
        router.plan(_request(n=2), POLICY)


def test_upstream_body_rewrites_model_and_adds_logprobs_only_on_scored_stages() -> None:
    parsed = _request(stream=True, temperature=0.2, top_logprobs=10, logprobs=True)
    scored = orjson.loads(upstream_body(parsed, "up-small", top_k=5, stream=False))
    assert scored["model"] == "up-small" and scored["top_logprobs"] == 10 and scored["logprobs"] is True
    assert "stream" not in scored and scored["temperature"] == 0.2
    final = orjson.loads(upstream_body(_request(), "up-large", top_k=None, stream=True))
    assert "logprobs" not in final and final["stream"] is True
    assert parsed.body["model"] == "cascade"  # the client's body itself is untouched


def test_client_body_trims_legacy_alternatives_to_what_was_asked() -> None:
    parsed = parse_request(b'{"model": "cascade", "prompt": "x", "logprobs": 1}', "completions")
    body = {"model": "up", "choices": [{"text": "a", "logprobs": {"top_logprobs": [{"a": -0.1, "b": -2.0}]}}]}
    assert client_body(body, "small", parsed)["choices"][0]["logprobs"]["top_logprobs"] == [{"a": -0.1}]


def test_retry_after_seconds_and_http_date() -> None:
    assert _parse_retry_after("2") == 2.0
    assert _parse_retry_after(None) is None and _parse_retry_after("soon") is None
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < _parse_retry_after(when) <= 30

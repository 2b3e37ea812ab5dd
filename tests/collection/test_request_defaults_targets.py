"""Collection sends what the gateway would: pool members and config models with request defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collection.collector import CollectOptions, request_body
from collection.prompts import Prompt
from collection.targets import Target, targets_from_config, targets_from_pool
from gateway.stages.bodies import upstream_body
from gateway.wire.requests import parse_request
from localpool.manifest import load_manifest
from money import Price
from policies.request_defaults import RequestDefaults

QUESTION = Prompt(query_id="q1", prompt="What is 6 * 7?", answer="42", grader="final_numeric")


def _target(defaults: dict | None) -> Target:
    return Target(
        name="member",
        base_url="http://x.test/v1",
        model="up",
        price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
        request_defaults=RequestDefaults.model_validate(defaults) if defaults is not None else None,
    )


def test_member_defaults_set_system_and_cap_when_the_run_sets_none() -> None:
    body = request_body(QUESTION, _target({"system": "Think.", "max_tokens": 256}), CollectOptions())
    assert body["messages"] == [
        {"role": "system", "content": "Think."},
        {"role": "user", "content": "What is 6 * 7?"},
    ]
    assert body["max_tokens"] == 256
    assert (body["model"], body["logprobs"], body["temperature"], body["n"]) == ("up", True, 0.0, 1)


def test_without_defaults_the_cap_is_one_token_as_before() -> None:
    assert request_body(QUESTION, _target(None), CollectOptions())["max_tokens"] == 1
    assert request_body(QUESTION, _target({"temperature": 0}), CollectOptions())["max_tokens"] == 1


def test_an_explicit_run_or_question_cap_wins_over_the_defaults() -> None:
    target = _target({"max_tokens": 256})
    assert request_body(QUESTION, target, CollectOptions(max_tokens=4))["max_tokens"] == 4
    capped = Prompt(query_id="q2", prompt="p", answer="1", grader="numeric", max_tokens=9)
    assert request_body(capped, target, CollectOptions())["max_tokens"] == 9


def test_collection_body_equals_the_gateways_scored_stage_body() -> None:
    """One merge for both sides: calibration measures what the gateway will send."""
    import orjson

    defaults = {"system": "Reply with the number only.", "max_tokens": 8, "reasoning_effort": "low"}
    target = _target(defaults)
    collected = request_body(QUESTION, target, CollectOptions(top_logprobs=15))
    client = {"model": "cascade", "messages": QUESTION.messages(), "temperature": 0.0}
    parsed = parse_request(orjson.dumps(client), "chat")
    sent = orjson.loads(upstream_body(parsed, "up", top_k=15, stream=False, defaults=target.request_defaults))
    assert {k: v for k, v in collected.items() if k not in ("n", "stream")} == sent


def test_pool_members_are_targets_on_their_models_server() -> None:
    manifest = load_manifest()
    member_name, member = next(iter(manifest.members.items()))
    (target,) = targets_from_pool([member_name])
    server = manifest.models[member.server]
    assert target.name == member_name and target.model == member.server
    assert target.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert target.price == server.price
    assert target.request_defaults == member.request_defaults


def test_config_models_carry_their_request_defaults(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "models": {
                    "fast": {
                        "base_url": "http://127.0.0.1:9/v1",
                        "model": "m",
                        "price": {"per_query_usd": 0},
                        "request_defaults": {"system": "S.", "max_tokens": 8},
                    }
                },
                "policy": "p.json",
            }
        )
    )
    (target,) = targets_from_config(config, None)
    assert target.request_defaults is not None
    assert target.request_defaults.system == "S." and target.request_defaults.completion_cap() == 8


@pytest.mark.parametrize("name", ["nope"])
def test_unknown_pool_name_lists_models_and_members(name: str) -> None:
    from collection.targets import TargetError

    manifest = load_manifest()
    with pytest.raises(TargetError, match=next(iter(manifest.members))):
        targets_from_pool([name])

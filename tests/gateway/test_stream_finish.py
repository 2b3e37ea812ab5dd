"""A committed cheap stream that breaks is finished by the final stage, where its model declares it
can continue an assistant message (gateway.streaming.stream_finish), against the scripted upstream:
what the official SDKs receive, what the continuation asked, what both calls are charged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from gateway.streaming.stream_finish import EchoCut
from money import Price
from money.charges import sent_bound
from tests.support.gateway_testkit import model_configs
from tests.support.policy_files import write_policy
from tests.support.scripted_upstream import ScriptedUpstream, ok

MESSAGES = [{"role": "user", "content": "Count the words."}]
LONG = " ".join(f"w{i}" for i in range(12))  # 12 tokens, one per streamed chunk
SENT = " ".join(f"w{i}" for i in range(6))  # the role chunk and six tokens before the cut
REST = " " + " ".join(f"w{i}" for i in range(6, 12))
SMALL_PRICE = Price(input_per_mtok=0.1, output_per_mtok=0.2)  # tests.support.gateway_testkit
LARGE_QUERY_USD = 0.001


def finishing_gateway(
    start_gateway: Any,
    make_settings: Any,
    upstream: ScriptedUpstream,
    tmp_path: Path,
    form: str | None = "prefill",
    small: dict[str, Any] | None = None,
    tokens: int = 3,
) -> Any:
    """A prefix tier (small -> large, decided on ``tokens`` tokens) whose ``large`` continues in
    ``form`` (None: it does not declare the capability)."""
    models = model_configs(upstream.base_url)
    models["small"].update(small or {})
    if form is not None:
        models["large"]["capabilities"] = {"continue_assistant": True, "continue_form": form}
    policy = write_policy(
        tmp_path / "prefix.json", {"balanced": {"commit": {"rule": "prefix", "tokens": tokens}}}
    )
    return start_gateway(make_settings(policy, models=models))


def broken_cheap_stream() -> Any:
    """A confident cheap answer, committed to, whose connection closes after six tokens."""
    return ok(LONG, confidence=0.99, break_stream_after=7)


def cheap_worst_case(upstream: ScriptedUpstream) -> float:
    """What the broken cheap call is charged: no usage came, so its worst case (money.charges)."""
    return sent_bound(SMALL_PRICE, orjson.dumps(upstream.calls("up-small")[0].body)).usd


def test_a_cut_committed_chat_stream_is_finished_by_the_final_stage(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = finishing_gateway(start_gateway, make_settings, upstream, tmp_path)
    upstream.script("up-small", broken_cheap_stream())
    upstream.script("up-large", ok(REST, confidence=None, usage=(30, 6)))
    chunks = list(
        gateway.client().chat.completions.create(
            model="cascade",
            messages=MESSAGES,
            stream=True,
            max_tokens=40,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == LONG  # the six tokens sent, then the continuation, in one stream
    assert {c.id for c in chunks} == {chunks[0].id} and {c.model for c in chunks} == {"small"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.role) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6  # the continuation's
    facts = chunks[-1].model_extra["cascade"]
    assert facts["continued"] == {"model": "large", "after_tokens": 6}
    assert facts["models_called"] == ["small", "large"]
    assert facts["cost_usd"] == pytest.approx(cheap_worst_case(upstream) + LARGE_QUERY_USD)
    asked = upstream.calls("up-large")[0].body
    assert asked["messages"] == [*MESSAGES, {"role": "assistant", "content": SENT}]
    assert asked["max_tokens"] == 40 - 6  # what is left of the answer's cap
    assert "continue_final_message" not in asked  # llama-server's form: the prefill alone


def test_responses_and_messages_streams_are_finished_in_the_vllm_form(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = finishing_gateway(start_gateway, make_settings, upstream, tmp_path, "continue_final_message")
    upstream.script("up-small", broken_cheap_stream())
    upstream.script("up-large", ok(REST, confidence=None))
    with gateway.client().responses.stream(model="cascade", input=MESSAGES) as events:
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        final = events.get_final_response()
    assert "".join(deltas) == LONG == final.output_text
    assert final.model_extra["cascade"]["continued"]["model"] == "large"
    asked = upstream.calls("up-large")[0].body
    assert asked["continue_final_message"] is True and asked["add_generation_prompt"] is False
    assert asked["messages"][-1] == {"role": "assistant", "content": SENT}
    upstream.script("up-small", broken_cheap_stream())
    upstream.script("up-large", ok(REST, confidence=None))
    client = gateway.anthropic_client()
    with client.messages.stream(model="cascade", max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == LONG and message.stop_reason == "end_turn"
    assert upstream.calls("up-large")[1].body["messages"][-1] == {"role": "assistant", "content": SENT}


def test_a_stalled_committed_stream_is_finished(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    # No chunk within the cheap model's timeout_s (the per-read timeout of a stream): a stall,
    # after the role chunk and one token, committed to on that token.
    small = {"timeout_s": 0.3}
    gateway = finishing_gateway(start_gateway, make_settings, upstream, tmp_path, small=small, tokens=1)
    upstream.script("up-small", ok("w0 w1 w2 w3", confidence=0.99, stall_body_s=1.0))
    upstream.script("up-large", ok(REST, confidence=None))
    body = {"model": "cascade", "messages": MESSAGES, "stream": True}
    with gateway.http.stream("POST", "/v1/chat/completions", json=body, timeout=20) as response:
        lines = [orjson.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in lines if c.get("choices"))
    assert upstream.calls("up-large")[0].body["messages"][-1]["content"] == "w0"  # sent before the stall
    assert text == "w0" + REST
    assert lines[-1]["cascade"]["continued"] == {"model": "large", "after_tokens": 1}


def test_without_the_capability_or_when_the_continuation_fails_the_stream_ends_in_an_error_event(
    start_gateway, make_settings, upstream: ScriptedUpstream, tmp_path: Path
) -> None:
    gateway = finishing_gateway(start_gateway, make_settings, upstream, tmp_path, form=None)
    upstream.script("up-small", broken_cheap_stream())
    received: list[str] = []
    stream = gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert LONG.startswith("".join(received)) and "".join(received) != LONG
    assert upstream.calls("up-large") == []
    # Declared, but the continuation breaks too: an error event, never a truncated success.
    gateway = finishing_gateway(start_gateway, make_settings, upstream, tmp_path / "declared")
    upstream.script("up-small", broken_cheap_stream())
    upstream.script("up-large", ok(REST, confidence=None, break_stream_after=3))
    received.clear()
    stream = gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIError):
        for chunk in stream:
            received.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
    assert len(upstream.calls("up-large")) == 1
    assert "".join(received) != LONG


def test_a_continuation_that_repeats_the_prefill_has_it_removed() -> None:
    whole = EchoCut("Mercury, Venus, Ea")  # llama-server: the prefill and the first token, one chunk
    assert [whole.cut(t) for t in ("Mercury, Venus, Ea", "rth", ", Mars")] == ["", "rth", ", Mars"]
    split = EchoCut("Mercury, Venus")
    assert [split.cut(t) for t in ("Merc", "ury, Venus, Earth")] == ["", ", Earth"]
    fresh = EchoCut("Mercury")  # a server that sends only the new text
    assert [fresh.cut(t) for t in (", Ven", "us")] == [", Ven", "us"]
    departs = EchoCut("Mercury, Venus")  # starts like the prefill, then departs from it: all new
    assert [departs.cut(t) for t in ("Merc", "ator")] == ["", "Mercator"]

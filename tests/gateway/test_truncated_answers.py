"""Cut answers (policies/truncation.py) live: a scored stage's answer that stopped at a completion cap
the client did not set escalates as ``truncated`` whatever its score, on chat (streamed or not), the
Responses API and the Messages API, driven by the official SDKs in front of the scripted upstream;
an answer cut at the client's own cap is kept (what the client asked for); a final stage's cut
answer is returned as it is."""

from __future__ import annotations

from typing import Any

from tests.support.gateway_logs import captured_request_line
from tests.support.gateway_testkit import RunningGateway
from tests.support.scripted_upstream import error, ok

QUESTION = [{"role": "user", "content": "Explain what a hash table is in two sentences."}]
CUT = "A hash table is an array of linked"
FULL = "A hash table maps keys to values through a hash function. Lookups take constant time on average."


def cut(completion_tokens: int = 8) -> Any:
    """A confident cheap answer (scored ~0.96, far above the 0.5 threshold) cut at a cap."""
    return ok(CUT, confidence=0.99, finish_reason="length", usage=(12, completion_tokens))


def reasons(gateway: RunningGateway, reason: str = "truncated") -> float:
    return gateway.sample("cascade_escalation_reasons_total", tier="balanced", model="small", reason=reason)


def test_a_confident_answer_cut_at_a_cap_the_client_did_not_set_escalates(gateway, upstream) -> None:
    upstream.script("up-small", cut())
    upstream.script("up-large", ok(FULL))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"
    assert float(raw.headers["x-cascade-score"]) > 0.9  # the score alone would have kept it
    choice = raw.parse().choices[0]
    assert choice.message.content == FULL and choice.finish_reason == "stop"
    assert reasons(gateway) == 1.0
    assert gateway.sample("cascade_escalations_total", from_model="small", to_model="large") == 1.0


def test_an_answer_cut_at_the_clients_own_cap_is_what_it_asked_for(gateway, upstream) -> None:
    upstream.script("up-small", cut(completion_tokens=8))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, max_tokens=8
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.headers["x-cascade-escalation-reason"] == "none"
    choice = raw.parse().choices[0]
    assert choice.message.content == CUT and choice.finish_reason == "length"
    assert reasons(gateway) == 0.0


def test_an_answer_cut_at_the_clients_own_n_predict_is_not_truncated(gateway, upstream) -> None:
    # llama.cpp's spelling of the cap, sent through as an extra field of the client's body.
    upstream.script("up-small", cut(completion_tokens=8))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, extra_body={"n_predict": 8}
    )
    assert raw.headers["x-cascade-models-called"] == "small"
    assert raw.headers["x-cascade-escalation-reason"] == "none"
    assert raw.parse().choices[0].finish_reason == "length"
    assert reasons(gateway) == 0.0


def test_an_answer_cut_below_the_clients_cap_was_cut_by_something_else(gateway, upstream) -> None:
    # The client allowed 512 tokens; the upstream stopped at 40 with `length` (its context ran out).
    upstream.script("up-small", cut(completion_tokens=40))
    upstream.script("up-large", ok(FULL))
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=QUESTION, max_completion_tokens=512
    )
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"
    assert raw.parse().choices[0].message.content == FULL


def test_a_final_stages_cut_answer_is_returned_as_it_is(gateway, upstream) -> None:
    upstream.script("up-small", cut())
    upstream.script("up-large", cut())
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"  # the cheap stage's, only
    assert raw.headers["x-cascade-model"] == "large"
    choice = raw.parse().choices[0]
    assert choice.message.content == CUT and choice.finish_reason == "length"
    upstream.script("up-large", cut())
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade/direct", messages=QUESTION
    )
    assert raw.headers["x-cascade-escalated"] == "false" and raw.parse().choices[0].finish_reason == "length"


def test_a_streamed_request_escalates_a_cut_stage_and_says_so_in_headers_and_last_chunk(
    gateway, upstream
) -> None:
    upstream.script("up-small", cut())
    upstream.script("up-large", ok(FULL))
    with gateway.client().chat.completions.with_streaming_response.create(
        model="cascade", messages=QUESTION, stream=True
    ) as response:
        assert response.headers["x-cascade-escalation-reason"] == "truncated"
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.replace(" ", "") == FULL.replace(" ", "")
    assert chunks[-1].model_extra["cascade"]["escalation_reasons"] == ["truncated"]
    assert reasons(gateway) == 1.0


def test_the_responses_api_escalates_a_cut_stage_unless_max_output_tokens_was_the_cap(
    gateway, upstream
) -> None:
    upstream.script("up-small", cut())
    upstream.script("up-large", ok(FULL))
    raw = gateway.client().responses.with_raw_response.create(model="cascade", input=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"
    response = raw.parse()
    assert response.status == "completed" and response.output_text == FULL
    upstream.script("up-small", cut(completion_tokens=8))
    raw = gateway.client().responses.with_raw_response.create(
        model="cascade", input=QUESTION, max_output_tokens=8
    )
    assert raw.headers["x-cascade-escalation-reason"] == "none"
    response = raw.parse()
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_the_messages_api_escalates_a_stage_cut_below_the_clients_max_tokens(gateway, upstream) -> None:
    client = gateway.anthropic_client()
    # max_tokens is required on Messages: a stop below it is a cap the client did not set.
    upstream.script("up-small", cut(completion_tokens=8))
    upstream.script("up-large", ok(FULL))
    raw = client.messages.with_raw_response.create(model="cascade", max_tokens=1024, messages=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"
    message = raw.parse()
    assert message.stop_reason == "end_turn" and message.content[0].text == FULL  # type: ignore[union-attr]
    upstream.script("up-small", cut(completion_tokens=8))
    raw = client.messages.with_raw_response.create(model="cascade", max_tokens=8, messages=QUESTION)
    assert raw.headers["x-cascade-escalation-reason"] == "none"
    assert raw.parse().stop_reason == "max_tokens"
    assert reasons(gateway) == 1.0


def test_the_log_line_lists_the_truncated_escalation(start_gateway, make_settings, upstream, capfd) -> None:
    gateway = start_gateway(make_settings(logging={"level": "info"}))
    upstream.script("up-small", cut())
    upstream.script("up-large", ok(FULL))
    gateway.client().chat.completions.create(model="cascade", messages=QUESTION)
    line = captured_request_line(capfd)
    assert line["escalation_reasons"] == ["truncated"] and line["models_called"] == ["small", "large"]


def test_a_cut_answer_is_still_the_degraded_fallback_when_the_next_stage_fails(gateway, upstream) -> None:
    upstream.script("up-small", cut())
    upstream.script("up-large", error(500), error(500), error(500))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=QUESTION)
    assert raw.headers["x-cascade-degraded"] == "true" and raw.headers["x-cascade-model"] == "small"
    assert raw.headers["x-cascade-escalation-reason"] == "truncated"
    choice = raw.parse().choices[0]
    assert choice.message.content == CUT and choice.finish_reason == "length"  # it says it was cut

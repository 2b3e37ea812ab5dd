"""Black-box scorers live (gateway/stages/blackbox_scoring.py): a scored stage's extra calls are made,
scored with the policies functions, charged like every call, and reserved before any call.

Through the app under uvicorn with the official SDK, in front of the scripted upstream. Every
model is priced per token here, so every charge is token-exact: what the headers, the log line and
``cascade_cost_usd_total`` say must equal what the upstream billed for every call it answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import openai
import orjson
import pytest
from learning_support import learning_block

from gateway.stages.blackbox_scoring import ANSWER_BYTES_PER_TOKEN
from money import Price
from money.charges import sent_bound
from policies import build_policy
from policies.blackbox import VERIFIER_PROMPT, verifier_request
from policies.errors import PolicyInvalidError
from publishing import check_servable
from tests.support.gateway_logs import captured_request_lines
from tests.support.gateway_testkit import RunningGateway, model_configs, until
from tests.support.policy_files import policy_document, write_policy
from tests.support.scripted_upstream import Produced, RecordedRequest, ScriptedUpstream, error, ok
from tests.support.traffic_rows import stored_rows

QUESTION = "What is 6 * 7?"
MESSAGES = [{"role": "user", "content": QUESTION}]
# USD per million (input, output) tokens, by upstream id: per token everywhere (token-exact costs).
PRICES = {"up-small": (0.5, 1.0), "up-medium": (2.0, 4.0), "up-large": (10.0, 30.0)}
SCORERS: dict[str, dict[str, Any]] = {
    "verifier": {"name": "verifier", "top_k": 5, "verifier": {"model": "medium"}},
    "consistency": {"name": "consistency", "samples": 3, "temperature": 0.7, "equivalence": "numeric"},
    "self_report": {"name": "self_report"},
    "logprobs": {"name": "mean_token_negentropy", "top_k": 5},
}


def per_token_models(base_url: str) -> dict[str, Any]:
    models = model_configs(base_url)
    for config in models.values():
        prompt, completion = PRICES[config["model"]]
        config["price"] = {"input_per_mtok": prompt, "output_per_mtok": completion}
    return models


def billed_usd(produced: Iterable[Produced]) -> float:
    """What the upstream billed for the answers it sent, at ``PRICES``."""
    return sum(
        (p.prompt_tokens * PRICES[p.model or ""][0] + p.completion_tokens * PRICES[p.model or ""][1]) / 1e6
        for p in produced
    )


def price(model_id: str) -> Price:
    prompt, completion = PRICES[model_id]
    return Price(input_per_mtok=prompt, output_per_mtok=completion)


def metric_cost(gateway: RunningGateway, model: str | None = None) -> float:
    family = gateway.metrics()["cascade_cost_usd"]
    return sum(
        s.value for s in family.samples if s.name.endswith("_total") and model in (None, s.labels["model"])
    )


@pytest.fixture
def serve_scorer(
    start_gateway: Callable[..., RunningGateway],
    make_settings: Callable[..., Any],
    upstream: ScriptedUpstream,
    tmp_path,
) -> Callable[..., RunningGateway]:
    """``serve_scorer(name, **settings_changes)``: the gateway serving the test policy scored by
    ``SCORERS[name]``, every model priced per token, request log lines on."""

    def start(name: str, **changes: Any) -> RunningGateway:
        policy = write_policy(tmp_path / f"{name}.json", scorer=SCORERS[name])
        changes.setdefault("models", per_token_models(upstream.base_url))
        changes.setdefault("logging", {"level": "info"})
        return start_gateway(make_settings(policy=policy, **changes))

    return start


def ask(gateway: RunningGateway, **extra: Any) -> Any:
    return gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, max_tokens=16, **extra
    )


def sent(call: RecordedRequest) -> bytes:
    return orjson.dumps(call.body)


@pytest.mark.parametrize("verdict", ["yes", "no"])
def test_a_verifier_route_is_charged_the_stage_the_verifier_and_the_escalation(
    serve_scorer, upstream: ScriptedUpstream, capfd, verdict: str
) -> None:
    upstream.script(
        "up-small", ok("42", confidence=None, usage=(14, 2))
    )  # the scored model gives no logprobs
    upstream.script("up-medium", ok(verdict, confidence=0.9, usage=(61, 1)))
    upstream.script("up-large", ok("6 * 7 = 42", usage=(20, 9)))
    gateway = serve_scorer("verifier")
    raw = ask(gateway)

    escalated = verdict == "no"
    # The verifier's call is listed where it was made, between the stages.
    assert raw.headers["x-cascade-models-called"] == ("small,medium,large" if escalated else "small,medium")
    assert float(raw.headers["x-cascade-score"]) == (0.0 if escalated else 1.0)
    (stage,) = upstream.calls("up-small")
    assert "logprobs" not in stage.body and "top_logprobs" not in stage.body
    (verifier,) = upstream.calls("up-medium")
    # The policies function's request, about the stage's answer, with the verifier's upstream id.
    assert verifier.body == verifier_request(
        MESSAGES, "42", model="up-medium", prompt=VERIFIER_PROMPT, top_logprobs=5
    )
    assert len(upstream.produced) == (3 if escalated else 2)
    billed = billed_usd(upstream.produced)
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed, rel=1e-9)
    assert metric_cost(gateway) == pytest.approx(billed, rel=1e-9)
    assert metric_cost(gateway, "medium") == pytest.approx((61 * 2.0 + 1 * 4.0) / 1e6)
    (line,) = captured_request_lines(capfd, 1)
    assert line["cost_usd"] == pytest.approx(billed, rel=1e-9)
    assert line["worst_case_usd"] >= line["cost_usd"]
    assert "escalation_reasons" not in line or line["escalation_reasons"] != ["scorer_failed"]


@pytest.mark.parametrize(
    ("samples", "accepted"), [(["42", "42", "The answer is 7"], True), (["7", "41", "42"], False)]
)
def test_a_consistency_route_is_charged_every_sample(
    serve_scorer, upstream: ScriptedUpstream, samples: list[str], accepted: bool
) -> None:
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script(
        "up-small", *(ok(text, confidence=None, usage=(14, 3 + i)) for i, text in enumerate(samples))
    )
    gateway = serve_scorer("consistency")
    raw = ask(gateway, temperature=0.0, seed=5)

    agreeing = sum(1 for s in samples if s.endswith("42"))
    assert float(raw.headers["x-cascade-score"]) == pytest.approx(agreeing / 3, abs=1e-6)
    assert raw.headers["x-cascade-escalated"] == ("false" if accepted else "true")
    stage, *drawn = upstream.calls("up-small")
    assert len(drawn) == 3
    for sample in drawn:  # the stage's own request at the policy's temperature, one choice, no seed
        assert sample.body["temperature"] == 0.7
        assert sample.body["messages"] == stage.body["messages"]
        assert not {"n", "seed", "logprobs", "stream"} & set(sample.body)
    assert len(upstream.produced) == (4 if accepted else 5)
    billed = billed_usd(upstream.produced)
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed, rel=1e-9)
    assert metric_cost(gateway) == pytest.approx(billed, rel=1e-9)


def test_a_self_report_route_asks_the_stage_model_once_more_and_charges_it(
    serve_scorer, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        "up-small", ok("42", confidence=None, usage=(14, 2)), ok("85", confidence=None, usage=(30, 2))
    )
    gateway = serve_scorer("self_report")
    raw = ask(gateway)

    assert float(raw.headers["x-cascade-score"]) == pytest.approx(0.85)
    assert raw.headers["x-cascade-models-called"] == "small,small"  # the stage, then its follow-up
    _, follow_up = upstream.calls("up-small")
    assert follow_up.body["messages"][-2] == {"role": "assistant", "content": "42"}
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed_usd(upstream.produced), rel=1e-9)


def test_a_streamed_request_through_a_verifier_route_is_charged_every_call(
    serve_scorer, upstream: ScriptedUpstream, capfd
) -> None:
    upstream.script("up-small", ok("41", confidence=None, usage=(14, 2)))
    upstream.script("up-medium", ok("no", confidence=0.8, usage=(61, 1)))
    upstream.script("up-large", ok("6 * 7 = 42", usage=(20, 9)))
    gateway = serve_scorer("verifier")
    stream = gateway.client().chat.completions.create(
        model="cascade", messages=MESSAGES, max_tokens=16, stream=True, stream_options={"include_usage": True}
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "6 * 7 = 42"
    (line,) = captured_request_lines(capfd, 1)
    billed = billed_usd(upstream.produced)
    assert [p.model for p in upstream.produced] == ["up-small", "up-medium", "up-large"]
    assert line["cost_usd"] == pytest.approx(billed, rel=1e-9)
    assert metric_cost(gateway) == pytest.approx(billed, rel=1e-9)


@pytest.mark.parametrize(
    "verifier_reply",
    [error(503), ok("maybe", confidence=0.9, usage=(61, 1))],
    ids=["verifier-call-fails", "verifier-answers-neither-yes-nor-no"],
)
def test_a_failing_verifier_call_escalates_with_reason_scorer_failed(
    serve_scorer, upstream: ScriptedUpstream, capfd, verifier_reply
) -> None:
    upstream.set_default("up-medium", verifier_reply)
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script("up-large", ok("6 * 7 = 42", usage=(20, 9)))
    gateway = serve_scorer("verifier")
    raw = ask(gateway)

    assert raw.headers["x-cascade-models-called"] == "small,medium,large"  # the verifier was called
    assert raw.headers["x-cascade-score"] == "none"
    assert upstream.calls("up-medium")
    billed = billed_usd(upstream.produced)
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed, rel=1e-9)
    (line,) = captured_request_lines(capfd, 1)
    assert line["escalation_reasons"] == ["scorer_failed"]
    assert metric_cost(gateway) == pytest.approx(billed, rel=1e-9)


def test_an_answer_longer_than_the_reservation_allows_is_not_sent_to_the_verifier(
    serve_scorer, upstream: ScriptedUpstream, capfd
) -> None:
    cap = 4
    upstream.script(
        "up-small", ok("x" * (ANSWER_BYTES_PER_TOKEN * cap + 1), confidence=None, usage=(14, cap))
    )
    upstream.script("up-large", ok("42", usage=(20, 2)))
    gateway = serve_scorer("verifier")
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, max_tokens=cap
    )

    assert raw.headers["x-cascade-models-called"] == "small,large"
    assert upstream.calls("up-medium") == []
    (line,) = captured_request_lines(capfd, 1)
    assert line["escalation_reasons"] == ["scorer_failed"]


@pytest.mark.parametrize("name", ["verifier", "consistency", "self_report"])
def test_the_reservation_covers_every_extra_call_a_scored_stage_may_make(
    serve_scorer, upstream: ScriptedUpstream, capfd, name: str
) -> None:
    # The longest answer a quoting call may quote, and scorers that escalate: every call is made.
    cap = 4
    longest = "x" * (ANSWER_BYTES_PER_TOKEN * cap)
    upstream.script("up-small", ok(longest, confidence=None), *(ok("1", confidence=None) for _ in range(3)))
    upstream.script("up-medium", ok("no", confidence=0.9))
    gateway = serve_scorer(name)
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="cascade", messages=MESSAGES, max_tokens=cap
    )
    assert raw.headers["x-cascade-escalated"] == "true"
    stage, *extra, final = upstream.calls()
    assert (stage.model, final.model) == ("up-small", "up-large")
    assert len(extra) == {"verifier": 1, "consistency": 3, "self_report": 1}[name]
    (line,) = captured_request_lines(capfd, 1)

    # The same request under a logprob scorer reserves the route alone; the difference must cover
    # the worst case of every extra call as it was sent (what a cancelled call is charged, and a
    # bound of any honest usage).
    upstream.reset()
    serve_scorer("logprobs").client().chat.completions.create(
        model="cascade", messages=MESSAGES, max_tokens=cap
    )
    (route_only,) = captured_request_lines(capfd, 1)
    extra_bound = sum(sent_bound(price(c.model or ""), sent(c)).usd for c in extra)
    assert line["worst_case_usd"] - route_only["worst_case_usd"] >= extra_bound - 1e-15 > 0  # float noise
    assert line["worst_case_usd"] >= line["cost_usd"]


def test_a_key_whose_limit_covers_the_route_but_not_the_verifier_is_refused_before_any_call(
    serve_scorer, upstream: ScriptedUpstream, monkeypatch, make_settings
) -> None:
    # The verifier quotes up to 16 bytes per completion token of the stage: with 2000 tokens and
    # the verifier's input at 2 USD/Mtok that is ~0.064 USD, while small -> large stays ~0.062.
    monkeypatch.setenv("TEST_CLIENT_KEYS", "sk-bb")
    budget = {
        "auth": {"api_keys_env": "TEST_CLIENT_KEYS", "admin_key_env": None},
        "budgets": {"limit_usd": 0.1},
    }
    plain = serve_scorer("logprobs", **budget)
    plain.client(api_key="sk-bb").chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=2000)
    upstream.reset()
    verifier = serve_scorer("verifier", **budget)
    with pytest.raises(openai.RateLimitError) as refused:
        verifier.client(api_key="sk-bb").chat.completions.create(
            model="cascade", messages=MESSAGES, max_tokens=2000
        )
    assert refused.value.body["code"] == "budget_exceeded"
    assert upstream.requests == []


def test_a_client_gone_during_the_verifier_call_is_charged_its_worst_case(
    serve_scorer, upstream: ScriptedUpstream
) -> None:
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script("up-medium", ok("yes", confidence=0.9, delay_s=10))
    gateway = serve_scorer("verifier")
    client = gateway.client().with_options(timeout=1.0)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="cascade", messages=MESSAGES, max_tokens=16)
    assert upstream.wait_for(lambda: "up-medium" in upstream.cancelled, timeout_s=10)
    (verifier,) = upstream.calls("up-medium")
    worst = sent_bound(price("up-medium"), sent(verifier)).usd
    assert until(lambda: metric_cost(gateway, "medium") > 0, timeout_s=10)
    assert metric_cost(gateway, "medium") == pytest.approx(worst, rel=1e-9)
    assert metric_cost(gateway) == pytest.approx(billed_usd(upstream.produced) + worst, rel=1e-9)


def test_a_policy_whose_verifier_the_config_lacks_cannot_be_served() -> None:
    policy = build_policy(policy_document(scorer={"name": "verifier", "verifier": {"model": "judge"}}))
    with pytest.raises(PolicyInvalidError, match="judge"):
        check_servable(policy, ["small", "medium", "large"])
    check_servable(policy, ["small", "medium", "large", "judge"])


def test_the_verifier_is_sent_its_request_defaults_under_the_policys_request(
    serve_scorer, upstream: ScriptedUpstream, capfd
) -> None:
    models = per_token_models(upstream.base_url)
    models["medium"]["request_defaults"] = {"system": "You grade answers.", "max_tokens": 50}
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script("up-medium", ok("yes", confidence=0.9, usage=(70, 1)))
    gateway = serve_scorer("verifier", models=models)
    raw = ask(gateway)

    (verifier,) = upstream.calls("up-medium")
    assert verifier.body["messages"][0] == {"role": "system", "content": "You grade answers."}
    assert verifier.body["max_tokens"] == 1  # the policy's one token, not the default cap
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed_usd(upstream.produced), rel=1e-9)
    (line,) = captured_request_lines(capfd, 1)
    assert line["worst_case_usd"] >= line["cost_usd"]


def test_a_legacy_completion_is_not_black_box_scored_and_makes_no_extra_call(
    serve_scorer, upstream: ScriptedUpstream, capfd
) -> None:
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script("up-large", ok("42", usage=(20, 2)))
    gateway = serve_scorer("verifier")
    raw = gateway.client().completions.with_raw_response.create(
        model="cascade", prompt=QUESTION, max_tokens=16
    )

    assert raw.headers["x-cascade-models-called"] == "small,large"  # on_missing_score: escalate
    assert upstream.calls("up-medium") == []
    assert float(raw.headers["x-cascade-cost-usd"]) == pytest.approx(billed_usd(upstream.produced), rel=1e-9)
    (line,) = captured_request_lines(capfd, 1)
    assert line["escalation_reasons"] == ["scorer_failed"]


def test_a_sampled_request_keeps_the_scored_answer_with_its_scorer_calls_cost(
    serve_scorer, upstream: ScriptedUpstream, tmp_path
) -> None:
    store = f"file://{tmp_path / 'traffic.jsonl'}"
    upstream.script("up-small", ok("42", confidence=None, usage=(14, 2)))
    upstream.script("up-medium", ok("yes", confidence=0.9, usage=(61, 1)))
    gateway = serve_scorer("verifier", learning=learning_block(store))
    raw = ask(gateway)
    assert raw.headers["x-cascade-models-called"] == "small,medium"

    rows: list[Any] = []

    def every_pool_model_has_a_row() -> bool:
        rows[:] = stored_rows(store)
        return len(rows) == 3

    assert until(every_pool_model_has_a_row, timeout_s=20)
    small = next(r for r in rows if r.model == "small")
    # The stage's cost is its call and the verifier's, as calibration counts a scored stage.
    assert small.cost_usd == pytest.approx((14 * 0.5 + 2 * 1.0 + 61 * 2.0 + 1 * 4.0) / 1e6)
    assert small.score == pytest.approx(float(raw.headers["x-cascade-score"]))
    assert all(r.score is None for r in rows if r.model != "small")  # shadow rows: no scorer calls

"""The llm judge against an OpenAI-compatible upstream at the HTTP seam (httpx.MockTransport)."""

from __future__ import annotations

import json
import math

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

from money import Price
from policies.blackbox import yes_no_mass
from traffic.judges import JudgeConfig, JudgeError, make_judge
from traffic.judges.llm import LLMJudge


def completion(alternatives: dict[str, float], usage: tuple[int, int] = (120, 1)) -> dict:
    """A llama.cpp-shaped chat completion whose first token has these alternative probabilities."""
    chosen = max(alternatives, key=alternatives.__getitem__)
    top = [{"token": t, "logprob": math.log(p), "bytes": list(t.encode())} for t, p in alternatives.items()]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "judge-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": chosen},
                "logprobs": {
                    "content": [
                        {"token": chosen, "logprob": math.log(alternatives[chosen]), "top_logprobs": top}
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def judge_with(handler, **kwargs) -> LLMJudge:  # type: ignore[no-untyped-def]
    kwargs.setdefault("price", Price(per_query_usd=0))
    return LLMJudge("http://judge.test/v1", "judge-model", transport=httpx.MockTransport(handler), **kwargs)


async def test_soft_label_is_p_yes_renormalized_over_yes_and_no() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json=completion({"Yes": 0.6, " yes": 0.1, "No": 0.2, ".": 0.1}))

    judge = judge_with(handler, price=Price(input_per_mtok=1.0, output_per_mtok=2.0))
    verdict = await judge.judge("Capital of France?", "Paris", "It is Paris.")
    await judge.aclose()
    assert verdict.correct == pytest.approx(0.7 / 0.9)
    assert verdict.cost_usd == pytest.approx((120 * 1.0 + 1 * 2.0) / 1e6)
    assert verdict.judge == "llm"
    body = seen[0]
    assert body["model"] == "judge-model" and body["max_tokens"] == 1 and body["logprobs"] is True
    assert "Paris" in body["messages"][1]["content"] and "It is Paris." in body["messages"][1]["content"]


async def test_a_confident_no_is_a_label_near_zero() -> None:
    judge = judge_with(
        lambda r: httpx.Response(200, json=completion({"no": 0.97, "yes": 0.01, "maybe": 0.02}))
    )
    verdict = await judge.judge("q", "4", "5")
    assert verdict.correct == pytest.approx(0.01 / 0.98)


async def test_neither_yes_nor_no_leaves_the_label_missing_but_counts_the_cost() -> None:
    judge = judge_with(
        lambda r: httpx.Response(200, json=completion({"Maybe": 0.9, "Hmm": 0.1})),
        price=Price(per_query_usd=0.002),
    )
    verdict = await judge.judge("q", "a", "b")
    assert verdict.correct is None
    assert verdict.cost_usd == pytest.approx(0.002)


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(503, json={"error": {"message": "overloaded"}}),
        httpx.Response(200, content=b"{not json"),
        httpx.Response(200, json={"choices": []}),
    ],
)
async def test_a_failed_judge_call_is_a_judge_error_never_a_zero(response: httpx.Response) -> None:
    judge = judge_with(lambda r: response)
    with pytest.raises(JudgeError, match="llm judge judge-model"):
        await judge.judge("q", "a", "b")


async def test_connection_refused_is_a_judge_error() -> None:
    judge = LLMJudge("http://127.0.0.1:1/v1", "judge-model", price=Price(per_query_usd=0), timeout_s=2)
    with pytest.raises(JudgeError, match="ConnectError"):
        await judge.judge("q", "a", "b")
    await judge.aclose()


async def test_api_key_comes_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    keys: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers.get("authorization"))
        return httpx.Response(200, json=completion({"yes": 0.9, "no": 0.1}))

    judge = judge_with(handler, api_key_env="JUDGE_KEY")
    with pytest.raises(JudgeError, match="JUDGE_KEY is not set"):
        await judge.judge("q", "a", "b")
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    await judge.judge("q", "a", "b")
    assert keys == ["Bearer sk-test"]


def test_yes_no_mass_falls_back_to_the_chosen_token() -> None:
    assert yes_no_mass({"token": "Yes", "logprob": math.log(0.8)}) == (pytest.approx(0.8), 0.0)
    assert yes_no_mass(None) == (0.0, 0.0)


def test_judge_config_builds_each_judge_and_refuses_unknown_fields() -> None:
    adapter = TypeAdapter(JudgeConfig)
    kinds = {
        "exact": {},
        "numeric": {"rel_tol": 0.01},
        "choice": {"letters": "ABCDE"},
        "similarity": {"threshold": 0.7},
    }
    for kind, extra in kinds.items():
        assert make_judge(adapter.validate_python({"kind": kind, **extra})).name == kind
    llm_config = {"kind": "llm", "base_url": "http://h:8080/v1", "model": "m"}
    llm = make_judge(adapter.validate_python({**llm_config, "price": {"per_query_usd": 0}}))
    assert llm.name == "llm"
    with pytest.raises(ValidationError, match="price"):  # a judge without a price is not free: an error
        adapter.validate_python(llm_config)
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "exact", "threshold": 0.5})
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "telepathy"})

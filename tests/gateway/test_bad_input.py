"""Bad client input gets the right 4xx with an OpenAI error body, never a 500."""

from __future__ import annotations

import httpx
import openai
import pytest

MESSAGES = [{"role": "user", "content": "hi"}]


def _post(gateway, body: bytes | dict, path: str = "/v1/chat/completions", **headers: str) -> httpx.Response:
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    return gateway.http.post(path, headers={"content-type": "application/json", **headers}, timeout=10, **kw)


def _assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code
    assert response.headers["x-request-id"]
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"", None),
        (b"[1, 2]", None),
        (b'"text"', None),
        ({"messages": MESSAGES}, "model"),
        ({"model": 3, "messages": MESSAGES}, "model"),
        ({"model": "cascade"}, "messages"),
        ({"model": "cascade", "messages": []}, "messages"),
        ({"model": "cascade", "messages": "hi"}, "messages"),
        ({"model": "cascade", "messages": [{"content": "no role"}]}, "messages[0]"),
        ({"model": "cascade", "messages": MESSAGES, "stream": "yes"}, "stream"),
        ({"model": "cascade", "messages": MESSAGES, "temperature": "hot"}, "temperature"),
        ({"model": "cascade", "messages": MESSAGES, "max_tokens": 1.5}, "max_tokens"),
        ({"model": "cascade", "messages": MESSAGES, "n": 0}, "n"),
        ({"model": "cascade", "messages": MESSAGES, "logprobs": 1}, "logprobs"),
        ({"model": "cascade", "messages": MESSAGES, "top_logprobs": 99}, "top_logprobs"),
        ({"model": "cascade", "messages": MESSAGES, "stream_options": 5}, "stream_options"),
    ],
)
def test_malformed_or_mistyped_body_is_400(gateway, upstream, body, param) -> None:
    error = _assert_openai_error(_post(gateway, body), 400, "invalid_request")
    assert error["param"] == param
    assert upstream.requests == []


def test_completions_without_prompt_is_400(gateway) -> None:
    error = _assert_openai_error(_post(gateway, {"model": "cascade"}, "/v1/completions"), 400)
    assert error["param"] == "prompt"


def test_unknown_tier_is_400_by_alias_and_by_header(gateway) -> None:
    error = _assert_openai_error(
        _post(gateway, {"model": "cascade/gold", "messages": MESSAGES}), 400, "unknown_tier"
    )
    assert "gold" in error["message"] and "balanced" in error["message"]
    error = _assert_openai_error(
        _post(gateway, {"model": "cascade", "messages": MESSAGES}, **{"X-Cascade-Tier": "gold"}),
        400,
        "unknown_tier",
    )
    assert error["param"] == "X-Cascade-Tier"


def _nested_body(levels: int, kind: bytes = b"[") -> bytes:
    """A chat body whose extra field nests ``levels`` arrays (or objects) inside the body object."""
    if kind == b"[":
        inner = b"[" * levels + b"]" * levels
    else:
        inner = b'{"a":' * (levels - 1) + b"{}" + b"}" * (levels - 1)
    head = b'{"model": "cascade", "messages": [{"role": "user", "content": "hi"}], "metadata": '
    return head + inner + b"}"


@pytest.mark.parametrize("levels", [254, 300, 1022, 1023, 1024, 5000])
def test_deeply_nested_body_is_400_not_500(gateway, upstream, levels) -> None:
    for kind in (b"[", b"{"):
        error = _assert_openai_error(_post(gateway, _nested_body(levels, kind)), 400, "invalid_request")
        assert "nest" in error["message"] or "not valid JSON" in error["message"]
    assert upstream.requests == []


def test_a_body_nested_as_deep_as_it_can_be_forwarded_is_forwarded(gateway, upstream) -> None:
    response = _post(gateway, _nested_body(253))  # 254 levels with the body object itself
    assert response.status_code == 200, response.text
    forwarded, depth = upstream.requests[0].body["metadata"], 1
    while forwarded:
        forwarded, depth = forwarded[0], depth + 1
    assert depth == 253


def test_unknown_model_is_404(gateway) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        gateway.client().chat.completions.create(model="gpt-17", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"


@pytest.mark.parametrize("value", ["cheap", "-1", "nan", "inf", ""])
def test_bad_budget_header_is_400(gateway, value) -> None:
    error = _assert_openai_error(
        _post(gateway, {"model": "cascade", "messages": MESSAGES}, **{"X-Cascade-Max-Cost-Usd": value}), 400
    )
    assert error["param"] == "X-Cascade-Max-Cost-Usd"


def test_n_above_one_is_refused_on_cascade_routes(gateway, upstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        gateway.client().chat.completions.create(model="cascade", messages=MESSAGES, n=2)
    assert info.value.body["param"] == "n"
    assert upstream.requests == []


def test_body_over_limit_is_413(gateway) -> None:
    big = {"model": "cascade", "messages": [{"role": "user", "content": "x" * 70000}]}
    _assert_openai_error(_post(gateway, big), 413, "request_too_large")


def test_chunked_body_over_limit_is_413(gateway) -> None:
    def chunks():
        yield b'{"model": "cascade", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'"}]}'

    response = gateway.http.post("/v1/chat/completions", content=chunks(), timeout=10)
    _assert_openai_error(response, 413)


def test_unknown_path_and_wrong_method_are_openai_errors(gateway) -> None:
    response = gateway.http.get("/v1/nothing", timeout=5)
    assert response.status_code == 404 and "error" in response.json()
    response = gateway.http.get("/v1/chat/completions", timeout=5)
    assert response.status_code == 405 and "error" in response.json()


def test_external_scorer_policy_is_refused_with_a_clear_message(
    start_gateway, make_settings, write_policy, upstream
) -> None:
    scorer = {"name": "external", "top_k": 5}
    gateway = start_gateway(make_settings(write_policy(scorer=scorer)))
    with pytest.raises(openai.APIStatusError) as info:
        gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)
    assert info.value.status_code == 503
    assert "external" in info.value.body["message"]
    # Configured models still pass through.
    assert gateway.client().chat.completions.create(model="large", messages=MESSAGES).model == "large"

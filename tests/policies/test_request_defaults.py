"""Per-model request defaults: merged under the client's fields, with the documented exceptions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from money.charges import COMPLETION_CAP_FIELDS
from policies.request_defaults import RequestDefaults, merge_request_defaults

USER = [{"role": "user", "content": "What is 6 * 7?"}]


def _defaults(**fields: object) -> RequestDefaults:
    return RequestDefaults.model_validate(fields)


def test_defaults_fill_fields_the_client_did_not_send() -> None:
    defaults = _defaults(system="Think.", max_tokens=256, temperature=0, reasoning_effort="high")
    merged = merge_request_defaults({"model": "m", "messages": USER}, defaults)
    assert merged == {
        "model": "m",
        "messages": [{"role": "system", "content": "Think."}, *USER],
        "max_tokens": 256,
        "temperature": 0,
        "reasoning_effort": "high",
    }


def test_client_fields_win_over_defaults() -> None:
    defaults = _defaults(temperature=0.7, reasoning_effort="high", seed=1)
    merged = merge_request_defaults(
        {"messages": USER, "temperature": 0, "reasoning_effort": "low", "seed": None}, defaults
    )
    assert (merged["temperature"], merged["reasoning_effort"], merged["seed"]) == (0, "low", None)


@pytest.mark.parametrize("client_cap", COMPLETION_CAP_FIELDS)
def test_a_client_cap_in_any_spelling_replaces_every_default_cap(client_cap: str) -> None:
    defaults = _defaults(max_tokens=256, max_completion_tokens=300, n_predict=320)
    merged = merge_request_defaults({"messages": USER, client_cap: 5}, defaults)
    assert {k: v for k, v in merged.items() if k in COMPLETION_CAP_FIELDS} == {client_cap: 5}


@pytest.mark.parametrize("role", ["system", "developer"])
def test_client_system_message_wins_over_the_default_one(role: str) -> None:
    messages = [*USER, {"role": role, "content": "Mine."}]
    merged = merge_request_defaults({"messages": messages}, _defaults(system="Default."))
    assert merged["messages"] == messages


def test_completions_requests_get_fields_but_no_system_message() -> None:
    merged = merge_request_defaults({"prompt": "2+2="}, _defaults(system="S.", max_tokens=3), chat=False)
    assert merged == {"prompt": "2+2=", "max_tokens": 3}


def test_the_clients_body_is_not_modified() -> None:
    body = {"messages": list(USER)}
    merge_request_defaults(body, _defaults(system="S.", max_tokens=3))
    assert body == {"messages": USER}


def test_no_defaults_is_a_copy_of_the_client_body() -> None:
    body = {"messages": USER, "max_tokens": 4}
    merged = merge_request_defaults(body, None)
    assert merged == body and merged is not body


@pytest.mark.parametrize("field", ["model", "messages", "stream", "logprobs", "top_logprobs", "n", "prompt"])
def test_fields_owned_by_the_client_or_gateway_cannot_be_defaults(field: str) -> None:
    with pytest.raises(ValidationError, match=f"cannot set {field}"):
        _defaults(**{field: 1})


def test_completion_cap_and_prompt_bytes_bound_what_defaults_add() -> None:
    defaults = _defaults(system="é" * 10, max_completion_tokens=64)
    assert defaults.completion_cap() == 64
    assert defaults.prompt_bytes() >= 20  # UTF-8 bytes of the system message, plus role markers
    assert _defaults(temperature=0).completion_cap() is None
    assert _defaults(temperature=0).prompt_bytes() == 0

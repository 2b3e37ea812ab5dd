"""What people send first, through the demo's own config and policy, in front of the real models.

The gateway runs with the config `cascade demo` writes for its default policy
(policies/local-demo-served.json: the arithmetic cascade for text, the BFCL tool-call cascade as
its ``kinds.tool_call`` section, and ``coverage`` sending everything else to the chat member), the
pool's two Qwen2.5-Coder servers on free ports (so a running demo is not disturbed). The official
openai SDK is the client. Checked: a ``get_weather(city)`` tool gets a real ``tool_calls`` entry; a
greeting and a question in words get complete answers (``finish_reason: stop``), not arithmetic;
structured output gets JSON of its schema; an arithmetic question goes through the calibrated
cascade; a stage cut at its member's own 8-token cap escalates as ``truncated``, in the headers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from localpool.demo_cli import DEMO_COVERAGE
from tests.support.local_demo import running_demo
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def demo_url(
    local_pool: LocalPool, repo_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The demo's config for its default policy, in front of the session's real pool (free ports)."""
    with running_demo(local_pool, repo_root, tmp_path_factory.mktemp("demo")) as demo:
        yield demo.url


@pytest.fixture(scope="module")
def client(demo_url: str) -> OpenAI:
    return OpenAI(base_url=f"{demo_url}/v1", api_key="unused", max_retries=0, timeout=300)


def ask(client: OpenAI, content: str, **fields: Any) -> tuple[Any, dict[str, str], float]:
    """One chat request: the parsed completion, the x-cascade-* headers and the seconds it took."""
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model=fields.pop("model", "cascade"),
        messages=[{"role": "user", "content": content}],
        temperature=0,
        **fields,
    )
    headers = {k: v for k, v in raw.headers.items() if k.startswith("x-cascade-")}
    return raw.parse(), headers, time.monotonic() - started


def test_the_openai_sdk_gets_a_real_tool_call_for_get_weather(client: OpenAI) -> None:
    completion, headers, _ = ask(client, "What is the weather like in Paris right now?", tools=[WEATHER])
    choice = completion.choices[0]
    assert headers["x-cascade-tier"] == "balanced", headers  # the tool-call section, calibrated
    assert choice.finish_reason == "tool_calls", (choice, headers)
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments)["city"].lower().startswith("paris"), call.function.arguments
    assert choice.message.content is None


@pytest.mark.parametrize(
    ("prompt", "words"),
    [
        ("hello", ()),
        ("Explain what a hash table is in two sentences.", ("key",)),
    ],
)
def test_what_people_type_first_gets_a_complete_answer_in_words(
    client: OpenAI, prompt: str, words: tuple[str, ...]
) -> None:
    completion, headers, _ = ask(client, prompt)
    choice = completion.choices[0]
    text = choice.message.content or ""
    assert choice.finish_reason == "stop", (text, headers)
    assert headers["x-cascade-tier"] == "uncalibrated", headers  # outside the arithmetic calibration
    assert headers["x-cascade-models-called"] == DEMO_COVERAGE["otherwise"], headers
    assert sum(c.isalpha() for c in text) >= 5, text  # words, not a number
    assert all(word in text.lower() for word in words), text


def test_structured_output_gets_json_of_its_schema(client: OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }
    completion, headers, _ = ask(
        client,
        "Name the capital of France and its country.",
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and headers["x-cascade-tier"] == "uncalibrated", headers
    value = json.loads(choice.message.content or "")
    assert set(value) >= {"city", "country"} and "paris" in value["city"].lower(), value


def test_an_arithmetic_question_goes_through_the_calibrated_cascade(client: OpenAI) -> None:
    completion, headers, _ = ask(client, "What is 23 + 19?")
    assert headers["x-cascade-tier"] == "balanced", headers
    assert headers["x-cascade-models-called"].split(",")[0] == "qwen1.5b-fast", headers
    assert "42" in (completion.choices[0].message.content or ""), completion


def test_a_stage_cut_at_its_members_own_cap_escalates_as_truncated(client: OpenAI) -> None:
    # Two numbers: inside the arithmetic calibration. The fast member (its own cap: 8 tokens) starts
    # the list and is cut; the economy tier's last stage, cut the same way, is returned as it is.
    completion, headers, _ = ask(
        client, "Write the numbers from 1 to 30, separated by commas.", model="cascade/economy"
    )
    assert headers["x-cascade-models-called"] == "qwen0.5b-fast,qwen1.5b-fast", headers
    assert headers["x-cascade-escalation-reason"] == "truncated", headers
    assert completion.choices[0].finish_reason == "length", completion  # the final stage's, as it is
    # The client's own cap: a cut answer is what it asked for, and is kept.
    completion, headers, _ = ask(
        client, "Write the numbers from 1 to 30, separated by commas.", model="cascade/economy", max_tokens=8
    )
    assert headers["x-cascade-models-called"] in ("qwen0.5b-fast", "qwen0.5b-fast,qwen1.5b-fast"), headers
    assert "truncated" not in headers["x-cascade-escalation-reason"], headers

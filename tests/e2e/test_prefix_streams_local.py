"""Streamed prefix cascades against the real local models, driven by the openai and anthropic SDKs.

`cascade serve` runs in front of the pool's two Qwen2.5-Coder servers (free ports) with a policy
written for the test: two tiers over the step-by-step members ``qwen0.5b-think -> qwen1.5b-think``,
both deciding streamed requests on the cheap stage's first 8 tokens (``commit: prefix``), one
whose threshold accepts every prefix (0) and one whose threshold escalates every prefix (above the
scorer's top), so each outcome happens for certain on the real models. Checked on the chat
completions, Responses and Messages APIs: an accepted stream is the cheap model's answer relayed
live (it starts long before that answer ends: the cheap stage writes a step-by-step answer of many
tokens after the decision), an escalated stream is the final model's answer, the cheap stage
cancelled after its prefix; the headers and the stream's facts say so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from openai import OpenAI

from policies import build_policy, save_policy
from tests.support.local_demo import running_demo
from tests.support.local_pool import LocalPool

pytestmark = pytest.mark.e2e

CHEAP, FINAL = "qwen0.5b-think", "qwen1.5b-think"
PREFIX_TOKENS = 8
QUESTION = (
    "A baker makes 24 muffins and sells them in boxes of 4 at 6 dollars a box. How many dollars does he earn?"
)
MESSAGES: Any = [{"role": "user", "content": QUESTION}]
# Content chunks the cheap stage must still relay after the first one for an accepted stream to
# have started before its answer ended: a step-by-step answer is far longer than its prefix.
LIVE_CHUNKS = 3 * PREFIX_TOKENS


def policy_document() -> dict[str, Any]:
    """Tiers ``accept`` (every prefix committed to) and ``escalate`` (every prefix rejected)."""

    def tier(threshold: float) -> dict[str, Any]:
        return {
            "objective": {"max_cost_usd": 0.001},
            "routes": [{"weight": 1.0, "models": [CHEAP, FINAL], "thresholds": [threshold]}],
            "expected": {"cost_usd": 0.00002, "quality": 0.6, "escalation_rate": 0.5},
            "commit": {"rule": "prefix", "tokens": PREFIX_TOKENS},
        }

    return {
        "schema_version": 1,
        "scorer": {"name": "mean_token_negentropy", "top_k": 10},
        "models": {
            CHEAP: {"mean_cost_usd": 0.00001, "quality": 0.5},
            FINAL: {"mean_cost_usd": 0.00003, "quality": 0.7},
        },
        "default_tier": "accept",
        # The next float above the scorer's top escalates every answer (calibration writes it so).
        "tiers": {"accept": tier(0.0), "escalate": tier(math.nextafter(1.0, math.inf))},
        "envelope": [],
    }


@pytest.fixture(scope="module")
def gateway_url(
    local_pool: LocalPool, repo_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`cascade serve` with the test policy in front of the session's real 0.5B and 1.5B servers."""
    work = tmp_path_factory.mktemp("prefix-e2e")
    policy = work / "policy.json"
    save_policy(build_policy(policy_document()), policy)
    with running_demo(local_pool, repo_root, work, policy) as demo:
        yield demo.url


@pytest.fixture(scope="module")
def openai_client(gateway_url: str) -> OpenAI:
    return OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def anthropic_client(gateway_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway_url, api_key="unused", max_retries=0, timeout=600)


class Timed:
    """Content pieces of a stream in order, with when the first and the last arrived."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.pieces: list[str] = []
        self.first: float | None = None
        self.last = 0.0

    def add(self, piece: str | None) -> None:
        if not piece:
            return
        now = time.monotonic() - self.started
        self.first = now if self.first is None else self.first
        self.last = now
        self.pieces.append(piece)

    def started_live(self) -> None:
        """The stream began long before its answer ended: many pieces after the first, over most
        of the stream's time (a buffered answer is replayed at once, in one or two pieces)."""
        assert self.first is not None
        assert len(self.pieces) > LIVE_CHUNKS, self.pieces
        assert self.first < self.last / 2, (self.first, self.last)


def test_openai_chat_stream_accepted_on_its_prefix_starts_with_the_cheap_model(openai_client: OpenAI) -> None:
    timed = Timed()
    with openai_client.chat.completions.with_streaming_response.create(
        model="cascade/accept", messages=MESSAGES, temperature=0, stream=True
    ) as response:
        headers = response.headers
        chunks = []
        for chunk in response.parse():
            chunks.append(chunk)
            timed.add(chunk.choices[0].delta.content if chunk.choices else None)
    assert headers["x-cascade-commit"] == "prefix"
    assert headers["x-cascade-commit-tokens"] == str(PREFIX_TOKENS)
    assert headers["x-cascade-escalated"] == "false" and headers["x-cascade-model"] == CHEAP
    assert {c.model for c in chunks} == {CHEAP}
    facts = chunks[-1].model_extra["cascade"]
    assert facts["models_called"] == [CHEAP] and facts["cost_usd"] > 0
    assert facts["commit"] == {"rule": "prefix", "tokens": PREFIX_TOKENS}
    timed.started_live()


def test_openai_chat_stream_escalated_on_its_prefix_comes_from_the_final_model(openai_client: OpenAI) -> None:
    with openai_client.chat.completions.with_streaming_response.create(
        model="cascade/escalate", messages=MESSAGES, temperature=0, stream=True
    ) as response:
        headers = response.headers
        chunks = list(response.parse())
    assert headers["x-cascade-escalated"] == "true" and headers["x-cascade-model"] == FINAL
    assert headers["x-cascade-escalation-reason"] == "low_score"
    assert headers["x-cascade-commit-tokens"] == str(PREFIX_TOKENS)
    assert {c.model for c in chunks} == {FINAL}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip()
    facts = chunks[-1].model_extra["cascade"]
    assert facts["models_called"] == [CHEAP, FINAL]


def responses_stream(client: OpenAI, tier: str, timed: Timed) -> Any:
    """Stream one Responses request: its last response object (``response.completed``, or
    ``response.incomplete`` for an answer that reached the member's cap)."""
    final = None
    with client.responses.stream(model=f"cascade/{tier}", input=QUESTION, temperature=0) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                timed.add(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert final is not None
    return final


def test_openai_responses_streams_through_a_prefix_tier(openai_client: OpenAI) -> None:
    timed = Timed()
    accepted = responses_stream(openai_client, "accept", timed)
    assert accepted.model == CHEAP and accepted.model_extra["cascade"]["escalated"] is False
    timed.started_live()
    escalated_text = Timed()
    escalated = responses_stream(openai_client, "escalate", escalated_text)
    assert escalated.model == FINAL and escalated.model_extra["cascade"]["models_called"] == [CHEAP, FINAL]
    assert "".join(escalated_text.pieces) == escalated.output_text


def test_anthropic_messages_stream_through_a_prefix_tier(anthropic_client: anthropic.Anthropic) -> None:
    timed = Timed()
    with anthropic_client.messages.stream(
        model="cascade/accept", max_tokens=192, messages=MESSAGES
    ) as stream:
        assert stream.response.headers["x-cascade-commit"] == "prefix"
        for piece in stream.text_stream:
            timed.add(piece)
        accepted = stream.get_final_message()
    assert accepted.model == CHEAP
    timed.started_live()
    with anthropic_client.messages.stream(
        model="cascade/escalate", max_tokens=192, messages=MESSAGES
    ) as stream:
        headers = stream.response.headers
        text = "".join(stream.text_stream)
        escalated = stream.get_final_message()
    assert headers["x-cascade-model"] == FINAL and headers["x-cascade-escalated"] == "true"
    assert escalated.model == FINAL and text

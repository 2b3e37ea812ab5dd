"""Codex CLI (``codex exec``) against the demo on the real local models (llama-server, no script).

The client sends its request as it does to OpenAI (its function tools, environment context and
skills list, with a short developer prompt instead of its own 17.7 KB one: ``CODEX_INSTRUCTIONS``),
through the committed demo policy (``tests/support/local_demo.py``); Codex's own whole prompt goes
through the gateway in tests/clients/test_codex.py. What each test checks: the answer the CLI
printed, that the session's second turn (``codex exec resume --last``) re-read only what is new
(llama-server's prompt cache, reported by the gateway as Responses ``cached_tokens``), and the wall
time of each turn (recorded as test properties and printed; docs/local-models.md#agent-clis-on-
the-local-pool has measured ones).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from client_support import codex_home, run_codex
from local_agents import (
    AGENT_TIMEOUT_S,
    CODEX_INSTRUCTIONS,
    CODEX_PROVIDER,
    FOLLOW_UP,
    SHORT_TASK,
    answered_number,
    has_number,
)

pytestmark = [pytest.mark.e2e, pytest.mark.agent_cli]


def _turn(codex: Path, prompt: str, workdir: Path, *args: str) -> tuple[str, dict[str, Any], float]:
    """One ``codex exec --json`` turn: the agent's last message, the turn's usage, its wall time."""
    started = time.monotonic()
    result = run_codex(codex, prompt, workdir, *args, "--json", timeout_s=AGENT_TIMEOUT_S)
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"codex failed ({result.returncode}): {result.stdout[-2000:]} {result.stderr[-3000:]}"
    )
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    messages = [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
    usage = [e["usage"] for e in events if e.get("type") == "turn.completed"]
    assert messages and usage, result.stdout[-3000:]
    return messages[-1], usage[-1], seconds


@pytest.mark.compat(client="codex", feature="text")
@pytest.mark.compat(client="codex", feature="stream")  # the CLI streams every request
def test_a_short_task_and_its_second_turn_on_the_local_models(local_demo, tmp_path, record_property) -> None:
    codex = codex_home(
        tmp_path, local_demo.url, model="cascade", provider=CODEX_PROVIDER, instructions=CODEX_INSTRUCTIONS
    )
    answer, usage, first_s = _turn(codex, SHORT_TASK, tmp_path / "work")
    record_property("first_turn_s", round(first_s, 1))
    number = answered_number(answer)
    record_property("first_answer", number)
    assert number is not None, answer  # the model's arithmetic is not the gateway's (local_agents.py)
    prompt = usage["input_tokens"]
    assert prompt > 1500  # Codex's tools and context, as a user's first request

    answer, usage, second_s = _turn(codex, FOLLOW_UP, tmp_path / "work", "resume", "--last")
    record_property("second_turn_s", round(second_s, 1))
    turns = f"first turn {first_s:.1f} s ({prompt} prompt tokens), second turn {second_s:.1f} s"
    print(f"codex on the local models: {turns}")
    assert has_number(answer, number), (number, answer)  # the first turn reached the model
    # The second turn's prompt starts with the first one's: llama-server re-read only the new part.
    assert usage["cached_input_tokens"] >= 0.9 * prompt, usage

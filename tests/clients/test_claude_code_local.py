"""Claude Code (``claude -p``) against the demo on the real local models (llama-server, no script).

The client sends its own prompt as it does to Anthropic: its system prompt and a dozen tools, about
11.6k tokens of Qwen2.5's tokenizer, through the committed demo policy (``tests/support/
local_demo.py``). What each test checks: the answer the CLI printed, that the conversation's second
turn re-read only what is new (llama-server's prompt cache, reported by the gateway as Anthropic
``cache_read_input_tokens``), and the wall time of each turn (recorded as test properties and
printed; docs/local-models.md#agent-clis-on-the-local-pool has measured ones). Not a compat
marker yet: its first turn has not been seen to complete within the time budget on this machine.
"""

from __future__ import annotations

import json
import time

import pytest
from client_support import run_claude
from local_agents import AGENT_TIMEOUT_S, CLAUDE_ENV, FOLLOW_UP, SHORT_TASK, has_number

pytestmark = pytest.mark.e2e


def _turn(url: str, prompt: str, home, *args: str) -> tuple[dict, float]:
    """One ``claude -p --output-format json`` turn: its result object and its wall time."""
    started = time.monotonic()
    result = run_claude(
        url,
        prompt,
        home,
        model="cascade",
        env=CLAUDE_ENV,
        args=("--output-format", "json", *args),
        timeout_s=AGENT_TIMEOUT_S,
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"claude failed ({result.returncode}): {result.stdout[-2000:]} {result.stderr[-2000:]}"
    )
    return json.loads(result.stdout), seconds


def test_a_short_task_and_its_second_turn_on_the_local_models(local_demo, tmp_path, record_property) -> None:
    first, first_s = _turn(local_demo.url, SHORT_TASK, tmp_path)
    record_property("first_turn_s", round(first_s, 1))
    assert has_number(first["result"], 42), first["result"]
    usage = first["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    assert prompt > 5000  # Claude Code's own system prompt and tools, as a user's first request

    second, second_s = _turn(local_demo.url, FOLLOW_UP, tmp_path, "--continue")
    record_property("second_turn_s", round(second_s, 1))
    print(f"claude-code on the local models: first turn {first_s:.1f} s, second turn {second_s:.1f} s")
    assert has_number(second["result"], 42), second["result"]
    # The second turn's prompt starts with the first one's: llama-server re-read only the new part.
    assert second["usage"]["cache_read_input_tokens"] >= 0.9 * prompt, second["usage"]

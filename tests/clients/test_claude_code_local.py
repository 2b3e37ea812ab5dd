"""Claude Code (``claude -p``) against the demo on the real local models (llama-server, no script).

Claude Code speaks Anthropic Messages, always streamed, with its own system prompt and tools. Its
default first request is about 11.7k tokens of Qwen2.5's tokenizer (48.8 KB: a dozen tools), about
ten minutes of prompt reading for the demo's 1.5B model on this 2-core machine, more than the test
budget. So the test runs it with Claude Code's own flags and settings (docs/compatibility.md says
so): one built-in tool (``--tools Bash``), a short ``--system-prompt`` (its own 7 KB one once got
the model to copy its environment section back as the answer), answers capped by
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` (its default cap, 32,000, let the model write on for minutes),
and the arithmetic commands its shell may run unasked (``--allowedTools``: asked for 6*7, the model
once called ``echo '6*7' | bc``). Its first request is then 6.6 KB. Through the committed arithmetic
demo policy (``tests/support/local_demo.py``), while a scored stage reads that prompt the gateway
starts the stream early and keeps it alive (``limits.stream_start_after_s``), so the client, which
gives up on response headers after 360 s whatever its settings, waits for the answer.

What the test checks: the answer the CLI printed, that the session's second turn (``claude -p
--continue``) re-read only what is new (llama-server's prompt cache, reported by the gateway as
Messages ``cache_read_input_tokens``), and the wall time of each turn (recorded as test properties
and printed; docs/local-models.md#agent-clis-on-the-local-pool has measured ones).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from client_support import run_claude
from local_agents import (
    AGENT_TIMEOUT_S,
    CLAUDE_ENV,
    CLAUDE_MAX_OUTPUT_TOKENS,
    CLAUDE_SYSTEM_PROMPT,
    CLAUDE_TOOLS,
    FOLLOW_UP,
    SHORT_TASK,
    answered_number,
    has_number,
)

pytestmark = [pytest.mark.e2e, pytest.mark.agent_cli]


def _turn(url: str, prompt: str, home: Path, *more: str) -> tuple[str, dict[str, Any], float]:
    """One ``claude -p --output-format json`` turn: the answer, the turn's usage, its wall time."""
    started = time.monotonic()
    result = run_claude(
        url,
        prompt,
        home,
        model="cascade",
        env={**CLAUDE_ENV, "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(CLAUDE_MAX_OUTPUT_TOKENS)},
        args=(
            *("--tools", CLAUDE_TOOLS, "--system-prompt", CLAUDE_SYSTEM_PROMPT),
            *("--allowedTools", *ARITHMETIC_COMMANDS, "--output-format", "json", *more),
        ),
        timeout_s=AGENT_TIMEOUT_S,
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, (
        f"claude failed ({result.returncode}): {result.stdout[-2000:]} {result.stderr[-3000:]}"
    )
    outcome = json.loads(result.stdout)
    assert outcome.get("is_error") is False, outcome
    return str(outcome.get("result") or ""), outcome.get("usage") or {}, seconds


# Not its default tool set: with a dozen tools the first request is too slow for the suite's budget.
ONE_TOOL = (
    "with `--tools Bash`, a short `--system-prompt` and answers capped at 256 tokens "
    "(a 6.6 KB first request; by default 48.8 KB)"
)
# Shell commands the model may use to compute the task's answer without asking (read-only arithmetic).
ARITHMETIC_COMMANDS = ("Bash(echo:*)", "Bash(bc:*)", "Bash(expr:*)")


@pytest.mark.compat(client="claude-code", feature="text", settings=ONE_TOOL)
@pytest.mark.compat(client="claude-code", feature="stream", settings=ONE_TOOL)  # it streams every request
def test_a_short_task_and_its_second_turn_on_the_local_models(local_demo, tmp_path, record_property) -> None:
    answer, usage, first_s = _turn(local_demo.url, SHORT_TASK, tmp_path)
    record_property("first_turn_s", round(first_s, 1))
    print(f"claude code on the local models: first turn {first_s:.1f} s, answer {answer!r}, usage {usage}")
    number = answered_number(answer)
    record_property("first_answer", number)
    assert number is not None, answer  # the model's arithmetic is not the gateway's (local_agents.py)
    prompt = usage.get("input_tokens", 0) + usage.get("cache_read_input_tokens", 0)
    assert prompt > 1000, usage  # Claude Code's Bash tool and its context, as a user's first request

    answer, usage, second_s = _turn(local_demo.url, FOLLOW_UP, tmp_path, "--continue")
    record_property("second_turn_s", round(second_s, 1))
    print(f"claude code on the local models: second turn {second_s:.1f} s, answer {answer!r}, usage {usage}")
    assert has_number(answer, number), (number, answer)  # the first turn reached the model
    # The second turn's prompt starts with the first one's: llama-server re-read only the new part.
    assert usage.get("cache_read_input_tokens", 0) >= 0.9 * prompt, usage

"""What the agent CLIs' tests on the real local models share: the tasks, the time budget, the
client settings for a slow local upstream, and how an answer is read.

Time budget: a first turn re-reads the CLI's whole prompt on 2 shared cores (both CLIs' own
system prompts are replaced by a short one here: with them, Claude Code's ~11.6k tokens and
Codex's ~6.1k are minutes of reading for the 1.5B model); a later turn of the same conversation
re-reads only what is new (llama-server's prompt cache). ``AGENT_TIMEOUT_S`` bounds one CLI run;
the clients' own timeouts are raised above the gateway's deadline
(``localpool.demo_config.REQUEST_TIMEOUT_S``), so that the client never abandons a request the
gateway is still serving.
"""

from __future__ import annotations

import re

from localpool.demo_config import REQUEST_TIMEOUT_S

SHORT_TASK = "What is 6*7? Answer with the number only."
# The second turn asks about the first (a 1.5B model adding 8 to 42 once answered 49). The tests
# check that the second answer repeats the first one's number, not that the first is 42: the CLIs
# send no temperature (Claude Code's request, as the gateway forwards it: model, max_tokens and the
# scorer's logprobs), so llama-server samples at its default, and the 0.5B model once answered 34
# with confidence enough to be served. The models' arithmetic is measured by the calibration.
FOLLOW_UP = "Write that same number again, and nothing else."
# One CLI run: two requests' deadlines (a retried first request, or a tool round trip), and a margin.
AGENT_TIMEOUT_S = 2 * REQUEST_TIMEOUT_S + 60

# Claude Code and Codex wait for the gateway (Claude Code gives up after 10 minutes, Codex after
# 300 s without a stream byte). Their retries stay on: a retry comes after the gateway's 504, when
# llama-server has cancelled the call, and it continues from the prefix the server already read (its
# prompt cache). Claude Code also gives up on a stream's response headers after 360 s whatever these
# say (measured, docs/local-models.md#agent-clis-on-the-local-pool): the gateway starts a stream
# whose decision is late after ``limits.stream_start_after_s`` and keeps it alive with pings.
_CLIENT_WAIT_MS = str(int((REQUEST_TIMEOUT_S + 30) * 1000))
CLAUDE_ENV = {"API_TIMEOUT_MS": _CLIENT_WAIT_MS, "CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS": _CLIENT_WAIT_MS}
# Claude Code's built-in tools in its local test (its ``--tools`` flag): its default first request
# (a dozen tools, 48.8 KB, ~11.7k tokens) takes the 1.5B model about ten minutes to read here; with
# its shell alone it is 13 KB.
CLAUDE_TOOLS = "Bash"
# Claude Code's cap on each answer (its CLAUDE_CODE_MAX_OUTPUT_TOKENS; default 32,000): a stage that
# writes on costs minutes at the 1.5B model's 2.4-3.3 tokens/s on a busy machine.
CLAUDE_MAX_OUTPUT_TOKENS = 256
# Claude Code's system prompt in its local test (its ``--system-prompt`` flag): its own (7 KB) once
# got the 1.5B model to copy its environment section back as the answer (measured), and it doubles
# the prompt to read.
CLAUDE_SYSTEM_PROMPT = (
    "You are a command-line assistant. Answer the user's question directly and briefly. "
    "Use the Bash tool only when a command is needed."
)
# Codex's base instructions in its local test (its ``model_instructions_file``): its own (17.7 KB,
# about 3.6k of its first request's 6.1k tokens) are most of what the models read on a first turn;
# with these the first request is 12.3 KB (its tools, environment context and skills list as sent).
CODEX_INSTRUCTIONS = (
    "You are a coding agent in a terminal. Answer the user's question directly and briefly. "
    "Run a command only when one is needed."
)
CODEX_PROVIDER = {"stream_idle_timeout_ms": int((REQUEST_TIMEOUT_S + 30) * 1000)}


def answered_number(text: str) -> int | None:
    """The first whole number in an agent's answer (``42``, ``**42**``, ``42.``), or None."""
    found = re.search(r"(?<![\d.])\d+(?![\d])", text or "")
    return int(found.group()) if found else None


def has_number(text: str, number: int) -> bool:
    """Whether ``number`` appears in ``text`` as a whole number (``42``, ``**42**``, ``42.``)."""
    return re.search(rf"(?<![\d.]){number}(?![\d])", text or "") is not None

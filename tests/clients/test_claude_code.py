"""Claude Code (``claude -p``, npm @anthropic-ai/claude-code) with ANTHROPIC_BASE_URL at the gateway.

It speaks Anthropic Messages (``POST /v1/messages?beta=true``, always streamed, ``x-api-key``), with
its own ~17 KB system prompt and a dozen tools, against the scripted upstream behind the cascade.
What each test checks: what the CLI printed, what the gateway sent upstream, and the tier the
gateway counted for the ``messages`` endpoint.
"""

from __future__ import annotations

import json

import pytest
from client_support import (
    CLIENT_KEY,
    content_text,
    printed,
    run_claude,
    served,
    streamed_tool_call,
    tool_call,
)

from tests.support.scripted_upstream import Reply, ok

pytestmark = pytest.mark.agent_cli

QUESTION = "What is the capital of France? One word."


@pytest.mark.compat(client="claude-code", feature="text")
def test_prints_the_accepted_cheap_answer(keyed_gateway, upstream, tmp_path) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    assert printed(run_claude(keyed_gateway.url, QUESTION, tmp_path), "claude") == "Paris."
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"][0]["role"] == "system"  # Claude Code's system blocks, as one chat system message
    assert "Claude" in content_text(sent["messages"][0]["content"])
    assert any(QUESTION in content_text(m["content"]) for m in sent["messages"] if m["role"] == "user")
    assert {t["function"]["name"] for t in sent["tools"]} >= {"Bash", "Read", "Write"}
    assert served(keyed_gateway, "balanced", "accepted", endpoint="messages") == 1


@pytest.mark.compat(client="claude-code", feature="stream")
def test_prints_the_escalated_answer_streamed_live(keyed_gateway, upstream, tmp_path) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris, for sure.", confidence=0.99))
    assert printed(run_claude(keyed_gateway.url, QUESTION, tmp_path), "claude") == "Paris, for sure."
    assert upstream.calls("up-large")[0].body["stream"] is True  # Claude Code streams: relayed live
    assert served(keyed_gateway, "balanced", "escalated", endpoint="messages") == 1


@pytest.mark.compat(client="claude-code", feature="tools")
def test_runs_a_bash_tool_call_and_answers_from_its_output(keyed_gateway, upstream, tmp_path) -> None:
    call = tool_call("Bash", {"command": "echo claude-tool-ran", "description": "Print a marker"}, "toolu_1")
    # The tool call escalates (no content tokens to score) and streams live from the large model;
    # the answer after the tool result is confident and accepted at the cheap stage.
    upstream.script(
        "up-small", Reply(content=None, tool_calls=[call]), ok("The command printed claude-tool-ran.")
    )
    upstream.script("up-large", streamed_tool_call(call))
    result = run_claude(
        keyed_gateway.url, "Run echo claude-tool-ran", tmp_path, args=("--allowedTools", "Bash(echo:*)")
    )
    assert printed(result, "claude") == "The command printed claude-tool-ran."
    after = upstream.calls("up-small")[-1].body["messages"]
    tool_results = [m for m in after if m["role"] == "tool"]
    assert len(tool_results) == 1 and "claude-tool-ran" in content_text(tool_results[0]["content"])
    assistant = [m for m in after if m["role"] == "assistant"]
    assert assistant[-1]["tool_calls"][0]["function"]["name"] == "Bash"
    assert tool_results[0]["tool_call_id"] == assistant[-1]["tool_calls"][0]["id"]
    assert served(keyed_gateway, "balanced", "escalated", endpoint="messages") == 1
    assert served(keyed_gateway, "balanced", "accepted", endpoint="messages") == 1


@pytest.mark.compat(client="claude-code", feature="tier-by-alias")
def test_model_alias_picks_the_tier(keyed_gateway, upstream, tmp_path) -> None:
    result = run_claude(keyed_gateway.url, QUESTION, tmp_path, model="cascade/direct")
    assert printed(result, "claude") == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(keyed_gateway, "direct", "direct", endpoint="messages") == 1


@pytest.mark.compat(client="claude-code", feature="tier-by-header")
def test_tier_header_picks_the_tier(keyed_gateway, upstream, tmp_path) -> None:
    # ANTHROPIC_CUSTOM_HEADERS: Claude Code's way to add headers to every API request.
    headers = {"ANTHROPIC_CUSTOM_HEADERS": "X-Cascade-Tier: direct"}
    result = run_claude(keyed_gateway.url, QUESTION, tmp_path, model="cascade", env=headers)
    assert printed(result, "claude") == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(keyed_gateway, "direct", "direct", endpoint="messages") == 1


@pytest.mark.compat(client="claude-code", feature="text")
def test_bearer_token_auth_is_accepted(keyed_gateway, upstream, tmp_path) -> None:
    # ANTHROPIC_AUTH_TOKEN sends ``Authorization: Bearer`` instead of ``x-api-key``.
    env = {"ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": CLIENT_KEY}
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    assert printed(run_claude(keyed_gateway.url, QUESTION, tmp_path, env=env), "claude") == "Paris."


@pytest.mark.compat(client="claude-code", feature="structured-output")
def test_json_schema_result_comes_from_its_structured_output_tool(keyed_gateway, upstream, tmp_path) -> None:
    # --json-schema adds a StructuredOutput tool that the model must call with the result.
    schema = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}
    call = tool_call("StructuredOutput", {"capital": "Paris"}, "toolu_s")
    upstream.script("up-small", Reply(content=None, tool_calls=[call]), ok("Done.", confidence=0.99))
    upstream.script("up-large", streamed_tool_call(call))
    args = ("--output-format", "json", "--json-schema", json.dumps(schema))
    result = json.loads(printed(run_claude(keyed_gateway.url, QUESTION, tmp_path, args=args), "claude"))
    assert result["structured_output"] == {"capital": "Paris"}
    first = upstream.calls("up-small")[0].body
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert offered["StructuredOutput"]["required"] == ["capital"]

"""Codex CLI (``codex exec``, npm @openai/codex) with a model provider whose base URL is the gateway.

It speaks the Responses API (``POST /v1/responses``, always streamed, ``Authorization: Bearer``
from the provider's ``env_key``), with a ~10 KB developer prompt and its function tools, against
the scripted upstream behind the cascade. What each test checks: what the CLI printed, what the
gateway sent upstream, and the tier the gateway counted for the ``responses`` endpoint.
"""

from __future__ import annotations

import json

import pytest
from client_support import codex_home, content_text, printed, run_codex, served, streamed_tool_call, tool_call

from tests.support.scripted_upstream import Reply, ok

pytestmark = pytest.mark.agent_cli

QUESTION = "What is the capital of France? One word."


@pytest.mark.compat(client="codex", feature="text")
def test_prints_the_accepted_cheap_answer(keyed_gateway, upstream, tmp_path) -> None:
    upstream.script("up-small", ok("Paris.", confidence=0.99))
    result = run_codex(codex_home(tmp_path, keyed_gateway.url), QUESTION, tmp_path / "work")
    assert printed(result, "codex", 3000) == "Paris."
    sent = upstream.calls("up-small")[0].body
    assert sent["messages"][0]["role"] == "system"  # Codex's developer prompt
    assert "Codex" in content_text(sent["messages"][0]["content"])
    assert any(QUESTION in content_text(m["content"]) for m in sent["messages"] if m["role"] == "user")
    assert "exec_command" in {t["function"]["name"] for t in sent["tools"]}
    assert served(keyed_gateway, "balanced", "accepted", endpoint="responses") == 1


@pytest.mark.compat(client="codex", feature="stream")
def test_prints_the_escalated_answer_streamed_live(keyed_gateway, upstream, tmp_path) -> None:
    upstream.script("up-small", ok("Lyon?", confidence=0.3))
    upstream.script("up-large", ok("Paris, for sure.", confidence=0.99))
    result = run_codex(codex_home(tmp_path, keyed_gateway.url), QUESTION, tmp_path / "work")
    assert printed(result, "codex", 3000) == "Paris, for sure."
    assert upstream.calls("up-large")[0].body["stream"] is True  # Codex streams: relayed live
    assert served(keyed_gateway, "balanced", "escalated", endpoint="responses") == 1


@pytest.mark.compat(client="codex", feature="tools")
def test_runs_a_shell_tool_call_and_answers_from_its_output(keyed_gateway, upstream, tmp_path) -> None:
    call = tool_call("exec_command", {"cmd": "echo codex-tool-ran"})
    upstream.script(
        "up-small", Reply(content=None, tool_calls=[call]), ok("The command printed codex-tool-ran.")
    )
    upstream.script("up-large", streamed_tool_call(call))
    result = run_codex(codex_home(tmp_path, keyed_gateway.url), "Run echo codex-tool-ran", tmp_path / "work")
    assert printed(result, "codex", 3000) == "The command printed codex-tool-ran."
    after = upstream.calls("up-small")[-1].body["messages"]
    tool_results = [m for m in after if m["role"] == "tool"]
    assert len(tool_results) == 1 and "codex-tool-ran" in content_text(tool_results[0]["content"])
    assistant = [m for m in after if m["role"] == "assistant"]
    called = assistant[-1]["tool_calls"][0]
    assert called["function"]["name"] == "exec_command"
    assert json.loads(called["function"]["arguments"]) == {"cmd": "echo codex-tool-ran"}
    assert tool_results[0]["tool_call_id"] == called["id"]
    assert served(keyed_gateway, "balanced", "escalated", endpoint="responses") == 1
    assert served(keyed_gateway, "balanced", "accepted", endpoint="responses") == 1


@pytest.mark.compat(client="codex", feature="tier-by-alias")
def test_model_alias_picks_the_tier(keyed_gateway, upstream, tmp_path) -> None:
    codex = codex_home(tmp_path, keyed_gateway.url, model="cascade/direct")
    assert printed(run_codex(codex, QUESTION, tmp_path / "work"), "codex", 3000) == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(keyed_gateway, "direct", "direct", endpoint="responses") == 1


@pytest.mark.compat(client="codex", feature="tier-by-header")
def test_tier_header_picks_the_tier(keyed_gateway, upstream, tmp_path) -> None:
    # ``http_headers`` of a model provider: added to every request Codex sends it.
    codex = codex_home(tmp_path, keyed_gateway.url, model="cascade", headers={"X-Cascade-Tier": "direct"})
    assert printed(run_codex(codex, QUESTION, tmp_path / "work"), "codex", 3000) == "answer from up-large"
    assert upstream.calls("up-small") == []
    assert served(keyed_gateway, "direct", "direct", endpoint="responses") == 1


@pytest.mark.compat(client="codex", feature="structured-output")
def test_output_schema_answer_is_printed(keyed_gateway, upstream, tmp_path) -> None:
    schema = {
        "type": "object",
        "properties": {"capital": {"type": "string"}},
        "required": ["capital"],
        "additionalProperties": False,
    }
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    upstream.script("up-small", ok('{"capital": "Paris"}', confidence=0.99))
    codex = codex_home(tmp_path, keyed_gateway.url)
    result = run_codex(codex, QUESTION, tmp_path / "work", "--output-schema", str(tmp_path / "schema.json"))
    assert json.loads(printed(result, "codex", 3000)) == {"capital": "Paris"}
    response_format = upstream.calls("up-small")[0].body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"] == schema


@pytest.mark.compat(
    client="codex",
    feature="tools",
    refused="its default built-in tools (a namespace tool, web_search) are not function tools: a 400 "
    'naming the tool (config.toml: web_search = "disabled", [features] multi_agent = false)',
)
def test_default_builtin_tools_are_refused_by_name(keyed_gateway, upstream, tmp_path) -> None:
    codex = codex_home(tmp_path, keyed_gateway.url, builtin_tools=True)
    result = run_codex(codex, QUESTION, tmp_path / "work")
    assert result.returncode != 0
    # Codex prints the gateway's error body on a line "ERROR: {...}".
    errors = [
        json.loads(line[len("ERROR: ") :])["error"]
        for line in result.stderr.splitlines()
        if line.startswith("ERROR: {")
    ]
    assert errors, result.stderr[-2000:]
    assert errors[-1]["type"] == "invalid_request_error"
    assert errors[-1]["param"].startswith("tools[")
    assert "namespace" in errors[-1]["message"] or "web_search" in errors[-1]["message"]
    assert upstream.requests == []

"""Driving the real clients: the installed agent CLIs, their offline environments, scripted tool calls.

* ``cli(name)``: the path of an agent CLI installed by scripts/setup.sh into tests/clients/npm
  (``claude``, ``codex``); a test fails with the setup command when it is missing.
* ``run_claude(url, prompt, home, ...)``: ``claude -p <prompt> --model <model>`` with
  ``ANTHROPIC_BASE_URL`` at the gateway and every non-essential traffic switched off.
* ``codex_home(home, url, ...)`` / ``run_codex(home, prompt, workdir)``: a CODEX_HOME whose
  ``config.toml`` names a provider at the gateway (``wire_api = "responses"``), and ``codex exec``.
* ``tool_call(name, arguments)``: an OpenAI ``tool_calls`` entry for scripted answers;
  ``streamed_tool_call(call)``: a scripted reply streaming that call as chat chunks (the live final
  stage of an escalated stream).
* ``served(gateway, tier, outcome, **labels)``: ``cascade_requests_total`` for a tier and outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripted_upstream import Reply

NPM_BIN = Path(__file__).resolve().parent / "npm" / "node_modules" / ".bin"
CLIENT_KEY = "sk-client-test-key"
CLI_TIMEOUT_S = 180


def cli(name: str) -> Path:
    """The installed agent CLI ``name`` (fails the test with the command that installs it)."""
    path = NPM_BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not installed: run `bash scripts/setup.sh` (npm ci in tests/clients/npm)")
    return path


def _base_env(home: Path) -> dict[str, str]:
    # A clean environment: no key, proxy or config of the machine leaks into the client.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def run_claude(
    url: str,
    prompt: str,
    home: Path,
    *,
    model: str = "cascade/balanced",
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    timeout_s: float = CLI_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run ``claude -p`` against the gateway at ``url`` (offline: no telemetry, no update check)."""
    home.mkdir(parents=True, exist_ok=True)
    workdir = home / "work"
    workdir.mkdir(exist_ok=True)
    environment = {
        **_base_env(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": CLIENT_KEY,
        # Side calls (titles, summaries) would use the small/fast model: keep them on a gateway tier.
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        **(env or {}),
    }
    command = [str(cli("claude")), "-p", prompt, "--model", model, *args]
    return _run_cli(command, workdir, environment, timeout_s)


def codex_home(
    home: Path,
    url: str,
    *,
    model: str = "cascade/balanced",
    headers: dict[str, str] | None = None,
    builtin_tools: bool = False,
    provider: dict[str, int] | None = None,
    instructions: str | None = None,
) -> Path:
    """A CODEX_HOME under ``home`` whose provider ``cascade`` is the gateway at ``url``.

    Web search and the multi-agent tools are off unless ``builtin_tools``: they are not function
    tools (``web_search``, ``namespace``), which the gateway's chat-completions stages cannot run.
    ``provider``: more settings of the provider (e.g. ``stream_idle_timeout_ms``).
    ``instructions``: Codex's base instructions instead of its own (its ``model_instructions_file``,
    written beside the config); its tools, environment context and protocol are unchanged.
    """
    codex = home / "codex"
    codex.mkdir(parents=True, exist_ok=True)
    lines = [
        f'model = "{model}"',
        'model_provider = "cascade"',
        "" if builtin_tools else 'web_search = "disabled"',
    ]
    if instructions is not None:
        (codex / "instructions.md").write_text(instructions + "\n")
        lines.append(f'model_instructions_file = "{codex / "instructions.md"}"')
    lines += [
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[features]",
        f"multi_agent = {'true' if builtin_tools else 'false'}",
        "",
        "[model_providers.cascade]",
        'name = "Cascade gateway"',
        f'base_url = "{url}/v1"',
        'env_key = "CASCADE_CLIENT_KEY"',
        'wire_api = "responses"',
    ]
    if headers:
        lines.append("http_headers = { " + ", ".join(f'"{k}" = "{v}"' for k, v in headers.items()) + " }")
    lines += [f"{key} = {value}" for key, value in (provider or {}).items()]
    (codex / "config.toml").write_text("\n".join(lines) + "\n")
    return codex


def run_codex(
    codex: Path, prompt: str, workdir: Path, *args: str, timeout_s: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``codex exec`` with ``CODEX_HOME=codex`` in ``workdir`` (``args`` before the prompt; a
    first one ``resume`` continues the last session)."""
    workdir.mkdir(parents=True, exist_ok=True)
    environment = {**_base_env(codex.parent), "CODEX_HOME": str(codex), "CASCADE_CLIENT_KEY": CLIENT_KEY}
    return _run_cli(
        [str(cli("codex")), "exec", "--skip-git-repo-check", *args, prompt], workdir, environment, timeout_s
    )


def _run_cli(
    command: list[str], workdir: Path, environment: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run an agent CLI in ``workdir``, no stdin, its output captured as text; no check of its exit."""
    return subprocess.run(
        command,
        cwd=workdir,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def content_text(content: Any) -> str:
    """The text of a chat message's content (a string or a list of text parts)."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def printed(result: subprocess.CompletedProcess[str], name: str, stderr_tail: int = 2000) -> str:
    """What the CLI ``name`` printed, asserting it exited 0 (else its output's tails)."""
    assert result.returncode == 0, (
        f"{name} failed ({result.returncode}): {result.stdout[-1000:]} {result.stderr[-stderr_tail:]}"
    )
    return result.stdout.strip()


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    """One OpenAI ``message.tool_calls`` entry."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def streamed_tool_call(call: dict[str, Any], usage: tuple[int, int] = (10, 5)) -> Reply:
    """A scripted streamed answer that is one tool call, in chat chunks (arguments in two pieces)."""
    arguments = call["function"]["arguments"]
    half = len(arguments) // 2
    base = {"id": "chunk-tool", "object": "chat.completion.chunk", "created": 1700000000, "model": "scripted"}
    head = {
        "index": 0,
        "id": call["id"],
        "type": "function",
        "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
    }
    tail = {"index": 0, "function": {"arguments": arguments[half:]}}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [head]}),
        chunk({"tool_calls": [tail]}),
        chunk({}, "tool_calls"),
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        },
    ]
    return Reply(content=None, tool_calls=[call], stream_events=events, usage=usage)


def served(gateway: Any, tier: str, outcome: str, **labels: str) -> float:
    """How many requests the gateway counted for ``tier`` and ``outcome`` (and ``labels``)."""
    return float(gateway.sample("cascade_requests_total", tier=tier, outcome=outcome, **labels))

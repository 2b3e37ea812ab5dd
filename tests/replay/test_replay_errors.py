"""``cascade replay`` fails with one clear line (exit 1), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cascade_cli.main import app
from tests.support.ports import free_port
from tests.support.scripted_upstream import ok


def questions(path: Path, n: int = 3) -> Path:
    rows = [{"query_id": f"y{i}", "prompt": f"Is {i} an integer?", "answer": "yes", "grader": "exact_match"}
            for i in range(n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def the_error(result: Any) -> str:
    """The single ``error:`` line of a failed run (asserting there is exactly one, and no traceback)."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no uncaught exception
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def replay(*args: str, **env: str) -> Any:
    return CliRunner().invoke(app, ["replay", *args], env=env or None)


def test_an_unknown_tier_reports_the_gateways_400_message(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file())
    result = replay(
        str(questions(tmp_path / "q.jsonl")),
        "-g",
        gateway.url,
        "-t",
        "nosuch",
        "-o",
        str(tmp_path / "r.json"),
    )
    assert the_error(result) == (
        "error: tier:nosuch: gateway answered HTTP 400: unknown tier 'nosuch'; this policy defines "
        "balanced, chain, direct, mix"
    )
    assert upstream.calls() == []


def test_an_unreachable_gateway_is_named(tmp_path):
    port = free_port()  # a port nothing listens on
    result = replay(
        str(questions(tmp_path / "q.jsonl")), "-g", f"http://127.0.0.1:{port}", "-o", str(tmp_path / "r.json")
    )
    assert the_error(result).startswith(
        f"error: cannot reach the gateway at http://127.0.0.1:{port} (ConnectError"
    )


def test_a_missing_or_wrong_key_reports_the_gateways_401(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file(), api_keys="sk-right")
    prompts = str(questions(tmp_path / "q.jsonl"))
    out = str(tmp_path / "r.json")
    missing = the_error(replay(prompts, "-g", gateway.url, "-t", "direct", "-o", out))
    assert missing.startswith(f"error: gateway at {gateway.url} answered GET /v1/models with HTTP 401: ")
    wrong = the_error(replay(prompts, "-g", gateway.url, "-t", "direct", "-o", out, "--api-key", "sk-wrong"))
    assert "HTTP 401: Incorrect API key provided" in wrong

    upstream.set_default("up-large", ok("yes"))
    assert (
        replay(prompts, "-g", gateway.url, "-t", "direct", "-o", out, CASCADE_API_KEY="sk-right").exit_code
        == 0
    )
    assert {c.model for c in upstream.calls()} == {"up-large"}


def test_something_that_is_not_a_cascade_gateway_is_refused(tmp_path, upstream):
    prompts = str(questions(tmp_path / "q.jsonl"))
    no_tiers = replay(prompts, "-g", upstream.base_url, "-o", str(tmp_path / "r.json"))
    assert "lists no cascade/<tier> model (no policy loaded?); pass --tier" in the_error(no_tiers)
    no_headers = replay(prompts, "-g", upstream.base_url, "-t", "x", "-o", str(tmp_path / "r.json"))
    assert (
        "without x-cascade-cost-usd / x-cascade-escalated headers; is this a cascade gateway?"
        in the_error(no_headers)
    )


def test_a_bad_prompt_file_names_the_file_and_line(tmp_path, upstream, policy_file, start_replay_gateway):
    gateway = start_replay_gateway(policy_file())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query_id": "a", "prompt": "p", "answer": "yes", "grader": "exact_match"}\n{oops\n')
    out = str(tmp_path / "r.json")
    assert the_error(replay(str(bad), "-g", gateway.url, "-o", out)).startswith(f"error: {bad}:2: not JSON")
    label = tmp_path / "label.jsonl"
    label.write_text('{"query_id": "m1", "prompt": "p", "answer": "Z", "grader": "multiple_choice"}\n')
    assert the_error(replay(str(label), "-g", gateway.url, "-o", out)) == (
        f"error: {label}: question 'm1': multiple-choice label 'Z' is not one of ABCD"
    )
    assert the_error(replay(str(tmp_path / "none.jsonl"), "-g", gateway.url, "-o", out)).startswith(
        f"error: {tmp_path / 'none.jsonl'}: cannot read the prompt set"
    )
    assert upstream.calls() == []


def test_a_bad_policy_file_and_changed_request_options_are_refused(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file())
    prompts = str(questions(tmp_path / "q.jsonl"))
    out = str(tmp_path / "r.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    assert the_error(replay(prompts, "-g", gateway.url, "-p", str(broken), "-o", out)).startswith(
        f"error: {broken}"
    )

    upstream.set_default("up-large", ok("yes"))
    assert replay(prompts, "-g", gateway.url, "-t", "direct", "-o", out).exit_code == 0
    changed = the_error(replay(prompts, "-g", gateway.url, "-t", "direct", "-o", out, "--max-tokens", "64"))
    assert "holds results sent with {'temperature': 0.0, 'max_tokens': None}" in changed
    assert "this run asks for {'temperature': 0.0, 'max_tokens': 64}" in changed

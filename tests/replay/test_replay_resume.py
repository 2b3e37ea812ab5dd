"""``cascade replay`` resumes where it stopped and keeps its concurrency bound (real gateway)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cascade_cli.main import app
from tests.support.scripted_upstream import error, ok
from tests.support.signals import with_sigint


def write_questions(path: Path, n: int) -> Path:
    """``n`` questions y0..y{n-1} ('Is i an integer?' -> yes, exact match)."""
    rows = [{"query_id": f"y{i}", "prompt": f"Is {i} an integer?", "answer": "yes", "grader": "exact_match"}
            for i in range(n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def asked(upstream: Any) -> list[str]:
    """Query ids of the questions the upstream received, in order ('Is 3 ...' -> y3)."""
    return [f"y{c.body['messages'][-1]['content'].split()[1]}" for c in upstream.calls()]


def result_ids(path: Path) -> list[str]:
    return [json.loads(line)["query_id"] for line in path.read_text().splitlines() if line.strip()]


# A command started from a non-interactive shell with `&` (nohup, CI wrappers, a backgrounded
# scripts/test.sh) inherits SIGINT ignored; the CLI must stop on it all the same.
@pytest.mark.parametrize("inherited", ["SIG_DFL", "SIG_IGN"], ids=["sigint-default", "sigint-ignored"])
def test_an_interrupted_replay_resumes_without_resending_finished_questions(
    tmp_path, repo_root, upstream, policy_file, start_replay_gateway, inherited
):
    gateway = start_replay_gateway(policy_file())
    upstream.set_default("up-large", ok("yes", delay_s=0.2))
    prompts = write_questions(tmp_path / "set.jsonl", 12)
    report = tmp_path / "report.json"
    results = tmp_path / "report.requests.jsonl"
    command = [sys.executable, "-m", "cascade_cli.main", "replay", str(prompts), "-g", gateway.url,
               "-t", "direct", "-o", str(report), "--concurrency", "1"]  # fmt: skip

    process = subprocess.Popen(
        with_sigint(inherited, command),
        cwd=repo_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not results.exists() or len(result_ids(results)) < 3):
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"cascade replay ({inherited}) did not stop within 30 s of SIGINT: {stderr}")

    assert process.returncode == 130, stderr
    assert "interrupted; finished requests are kept" in stderr and "Traceback" not in stderr
    assert not report.exists()
    finished = result_ids(results)
    assert 3 <= len(finished) < 12

    upstream.reset()
    upstream.set_default("up-large", ok("yes"))
    result = CliRunner().invoke(app, command[3:])

    assert result.exit_code == 0, result.output
    assert sorted(asked(upstream)) == sorted(set(result_ids(prompts)) - set(finished))
    assert sorted(result_ids(results)) == sorted(f"y{i}" for i in range(12))
    assert json.loads(report.read_text())["arms"][0]["requests"] == 12
    assert f"{len(finished)} already in" in result.stderr


def test_failed_requests_write_nothing_and_are_retried_by_the_next_run(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file())
    upstream.set_default("up-large", ok("yes"))
    upstream.script("up-large", ok("yes"), error(503), error(503))  # y1 fails (the gateway retries once)
    prompts = write_questions(tmp_path / "set.jsonl", 4)
    args = ["replay", str(prompts), "-g", gateway.url, "-t", "direct", "-o", str(tmp_path / "r.json"),
            "--concurrency", "1", "--retries", "0"]  # fmt: skip

    first = CliRunner().invoke(app, args)

    assert first.exit_code == 1
    assert first.stderr.strip().splitlines()[-1] == (
        "error: 1 requests failed; run the same command again to retry them"
    )
    assert json.loads((tmp_path / "r.json").read_text())["arms"][0]["missing"] == 1
    assert sorted(result_ids(tmp_path / "r.requests.jsonl")) == ["y0", "y2", "y3"]

    upstream.reset()
    upstream.set_default("up-large", ok("yes"))
    second = CliRunner().invoke(app, args)

    assert second.exit_code == 0, second.output
    assert asked(upstream) == ["y1"]
    assert json.loads((tmp_path / "r.json").read_text())["arms"][0]["missing"] == 0


def test_no_more_requests_are_in_flight_than_the_concurrency_bound(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file())
    upstream.set_default("up-large", ok("yes", delay_s=0.15))
    prompts = write_questions(tmp_path / "set.jsonl", 12)
    peak = 0
    stop = threading.Event()

    def sample() -> None:  # requests the upstream has received and not yet answered
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(upstream.requests) - len(upstream.completed))
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result = CliRunner().invoke(
        app, ["replay", str(prompts), "-g", gateway.url, "-t", "direct", "-o", str(tmp_path / "r.json"),
              "--concurrency", "3"],
    )  # fmt: skip
    stop.set()
    sampler.join()

    assert result.exit_code == 0, result.output
    assert len(upstream.calls("up-large")) == 12
    assert peak == 3


def test_a_request_slower_than_the_timeout_fails_and_max_tokens_is_passed_through(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    gateway = start_replay_gateway(policy_file())
    upstream.script("up-large", ok("yes"), ok("yes", delay_s=1.6))  # y1 outlasts --timeout-s 1
    upstream.set_default("up-large", ok("yes"))
    prompts = write_questions(tmp_path / "set.jsonl", 3)
    args = ["replay", str(prompts), "-g", gateway.url, "-t", "direct", "-o", str(tmp_path / "r.json"),
            "--concurrency", "1", "--retries", "0", "--timeout-s", "1", "--max-tokens", "7"]  # fmt: skip

    result = CliRunner().invoke(app, args)

    assert result.exit_code == 1
    assert "  tier:direct y1: ReadTimeout" in result.stderr
    assert sorted(result_ids(tmp_path / "r.requests.jsonl")) == ["y0", "y2"]
    assert [c.body["max_tokens"] for c in upstream.calls()] == [7, 7, 7]


def test_without_max_tokens_none_is_sent(tmp_path, upstream, policy_file, start_replay_gateway):
    gateway = start_replay_gateway(policy_file())
    upstream.set_default("up-large", ok("yes"))
    prompts = write_questions(tmp_path / "set.jsonl", 2)
    result = CliRunner().invoke(
        app, ["replay", str(prompts), "-g", gateway.url, "-t", "direct", "-o", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 0, result.output
    # No cap from replay: the gateway sends the model's own default cap (docs/contracts.md#charges).
    default_cap = 4096
    sent = [(c.body["max_tokens"], c.body["temperature"]) for c in upstream.calls()]
    assert sent == [(default_cap, 0.0)] * 2

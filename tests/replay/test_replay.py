"""``cascade replay`` against a real gateway (scripted upstream models, real policy file).

The upstream answers are scripted so that every realized figure is known in advance: which
questions the cheap model answers confidently (accepted) or not (escalated), which answers are
right, and what each call costs (``small``: 10 prompt + 5 completion tokens at 0.1/0.2 USD per
million = 2e-6 USD; ``large``: 0.001 USD per query).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from cascade_cli.main import app
from collection.prompts import load_prompts
from policies import load_policy
from policies.response_decision import DecisionReader
from tests.support.scripted_upstream import ok

SMALL_COST = (10 * 0.1 + 5 * 0.2) / 1e6
LARGE_COST = 0.001
# The table's caption, explaining the "!" beside an expectation outside its interval.
LEGEND = "the expectation lies outside the realized interval"


def write_prompts(path: Path, n: int = 10, grader: str = "numeric") -> Path:
    """``n`` arithmetic questions q0..q{n-1}: 'What is i + i?' -> 2i (with a system message)."""
    rows = [
        {
            "query_id": f"q{i}",
            "system": "Reply with the number only.",
            "prompt": f"What is {i} + {i}?",
            "answer": str(2 * i),
            "grader": grader,
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def script_balanced(upstream: Any) -> None:
    """Balanced tier (small -> large @ 0.5) on q0..q9, in order: q0-q3 accepted and right, q4-q5
    accepted and wrong, q6-q9 escalated; large answers q6-q8 right and q9 wrong.
    Realized: quality 7/10, escalation 4/10, cost (10 x small + 4 x large) / 10."""
    confident = [ok(str(2 * i), confidence=0.99) for i in range(4)] + [ok("999", confidence=0.99)] * 2
    unsure = [ok("0", confidence=0.3)] * 4
    upstream.script("up-small", *confident, *unsure)
    upstream.script("up-large", ok("12"), ok("14"), ok("16"), ok("999"))


def invoke(*args: str) -> Any:
    """Run ``cascade replay`` in process; stdout and stderr stay separate."""
    return CliRunner().invoke(app, ["replay", *args])


@dataclass
class _BalancedRun:
    gateway: Any
    prompts: Path
    report_path: Path
    result: Any
    report: dict[str, Any]


def _replay_balanced(tmp_path, upstream, policy, start_replay_gateway, *options) -> _BalancedRun:
    """Replay the ten scripted questions through the balanced tier of ``policy``, one at a time, with
    ``options``, after checking the run exited 0."""
    gateway = start_replay_gateway(policy)
    prompts = write_prompts(tmp_path / "set.jsonl")
    script_balanced(upstream)
    report_path = tmp_path / "out" / "report.json"
    result = invoke(
        str(prompts), "-g", gateway.url, "-t", "balanced", "-p", str(policy), "-o", str(report_path),
        "--concurrency", "1", *options, "--html", str(tmp_path / "out" / "report.html"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return _BalancedRun(gateway, prompts, report_path, result, json.loads(report_path.read_text()))


def test_realized_quality_cost_and_escalation_are_exact(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    policy = policy_file()  # balanced expects quality 0.7, cost 0.0004, escalation 0.4
    run = _replay_balanced(tmp_path, upstream, policy, start_replay_gateway, "--strict")
    prompts, result, report = run.prompts, run.result, run.report
    [arm] = report["arms"]
    assert (arm["arm"], arm["requests"], arm["missing"]) == ("tier:balanced", 10, 0)
    assert arm["quality"]["realized"] == pytest.approx(0.7)
    assert arm["escalation_rate"]["realized"] == pytest.approx(0.4)
    assert arm["cost_usd"]["realized"] == pytest.approx((10 * SMALL_COST + 4 * LARGE_COST) / 10, rel=1e-9)
    # Wilson 95% interval of 7/10 (Newcombe 1998, table I): 0.3968 to 0.8922.
    assert (arm["quality"]["method"], arm["quality"]["low"], arm["quality"]["high"]) == (
        "wilson",
        pytest.approx(0.3968, abs=5e-5),
        pytest.approx(0.8922, abs=5e-5),
    )
    assert arm["cost_usd"]["method"] == "bootstrap"
    assert arm["cost_usd"]["low"] < arm["cost_usd"]["realized"] < arm["cost_usd"]["high"]
    assert arm["answered_by"] == {"small": 6, "large": 4}
    assert arm["served_tiers"] == {"balanced": 10}
    assert arm["expected_from"] == "tiers.balanced.expected"
    assert arm["outside"] == [] and arm["ok"] is True and report["flags"] == [] and report["ok"] is True
    assert report["policy"]["matches"] is True
    assert arm["latency_ms"]["p50"] > 0 and arm["latency_ms"]["p95"] >= arm["latency_ms"]["p50"]
    assert "every expectation lies within its realized interval" in result.stdout
    assert LEGEND not in result.stdout  # nothing is marked, so there is nothing to explain
    assert (tmp_path / "out" / "report.html").read_text().count("tier:balanced") >= 1

    # Same prompt format as `cascade collect`: the messages collect would send, at temperature 0.
    expected_messages = [q.messages() for q in load_prompts(prompts)]
    small_calls = upstream.calls("up-small")
    assert [c.body["messages"] for c in small_calls] == expected_messages
    assert {c.body["temperature"] for c in small_calls} == {0.0}
    assert len(upstream.calls("up-large")) == 4


def test_a_far_expectation_is_flagged_and_a_matching_one_is_not(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    served = policy_file()
    far = policy_file(balanced={"expected": {"cost_usd": 0.00001, "quality": 0.2, "escalation_rate": 0.95}})
    gateway = start_replay_gateway(served)
    prompts = write_prompts(tmp_path / "set.jsonl")
    script_balanced(upstream)
    first = tmp_path / "matching.json"
    assert invoke(str(prompts), "-g", gateway.url, "-t", "balanced", "-p", str(served), "-o", str(first),
                  "--concurrency", "1").exit_code == 0  # fmt: skip

    # The same results checked against expectations far from them: every metric is flagged,
    # and the served policy is not the one the expectations come from.
    far_report = tmp_path / "far.json"
    (tmp_path / "far.requests.jsonl").write_bytes((tmp_path / "matching.requests.jsonl").read_bytes())
    result = invoke(str(prompts), "-g", gateway.url, "-t", "balanced", "-p", str(far), "-o", str(far_report),
                    "--strict")  # fmt: skip

    assert result.exit_code == 3, result.output
    report = json.loads(far_report.read_text())
    assert report["arms"][0]["outside"] == ["quality", "cost_usd", "escalation_rate"]
    assert report["policy"]["matches"] is False and report["ok"] is False and report["arms"][0]["ok"] is False
    assert any("expected quality 0.2 is outside the realized 95% interval" in f for f in report["flags"])
    assert any("the gateway served policy" in f for f in report["flags"])
    assert "POLICY MISMATCH" in result.stdout
    assert LEGEND in result.stdout
    assert len(upstream.calls()) == 14  # nothing was sent again


def write_yes_prompts(path: Path, n: int) -> Path:
    """``n`` questions whose right answer is 'yes' (exact match)."""
    rows = [{"query_id": f"y{i}", "prompt": f"Is {i} an integer?", "answer": "yes", "grader": "exact_match"}
            for i in range(n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_streamed_replay_reads_the_decision_of_streams_the_gateway_started_early(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    # The cheap stage answers after 0.5 s; the gateway starts the stream after 0.05 s, so its
    # decision travels as SSE comment lines and the last chunk's cascade object, not as headers.
    policy = policy_file()
    served_id = load_policy(policy).policy_id
    gateway = start_replay_gateway(policy, limits={"stream_start_after_s": 0.05, "stream_keepalive_s": 0.05})
    upstream.set_default("up-small", ok("yes", confidence=0.99, delay_s=0.5))
    body = {"model": "cascade/balanced", "messages": [{"role": "user", "content": "Is 1 an integer?"}]}
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST", gateway.url + "/v1/chat/completions", json={**body, "stream": True}
        ) as response,
    ):
        assert "x-cascade-policy" not in response.headers  # started before the decision
        reader = DecisionReader(response.headers)
        for line in response.iter_lines():
            if not reader.comment(line) and line.startswith("data: {"):
                reader.chunk(json.loads(line[6:]))
    decision = reader.decision()
    assert decision.policy_id == served_id and decision.final
    assert (decision.tier, decision.model, decision.escalated) == ("balanced", "small", False)

    out = tmp_path / "r.json"
    prompts = write_yes_prompts(tmp_path / "yes.jsonl", 2)
    result = invoke(
        str(prompts), "-g", gateway.url, "-p", str(policy), "-t", "balanced", "-o", str(out), "--stream"
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["policy"]["served_policy_ids"] == [served_id] and report["policy"]["matches"] is True
    rows = [json.loads(line) for line in (tmp_path / "r.requests.jsonl").read_text().splitlines()]
    assert [(row["policy_id"], row["tier"], row["model"]) for row in rows] == [
        (served_id, "balanced", "small")
    ] * 2
    assert "POLICY MISMATCH" not in result.stdout


def test_a_budget_is_checked_against_the_envelope_point_the_gateway_picks(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    policy = policy_file()
    gateway = start_replay_gateway(policy)
    upstream.set_default("up-small", ok("yes", confidence=0.99))
    upstream.set_default("up-large", ok("yes"))
    prompts = write_yes_prompts(tmp_path / "yes.jsonl", 6)
    out = tmp_path / "budgets.json"

    budgets = ["--max-cost-usd", "0.0005", "--max-cost-usd", "0.002", "--max-cost-usd", "0.000001"]
    result = invoke(str(prompts), "-g", gateway.url + "/v1", "-p", str(policy), "-o", str(out), *budgets)

    assert result.exit_code == 0, result.output
    arms = {a["arm"]: a for a in json.loads(out.read_text())["arms"]}
    assert list(arms) == ["budget:0.0005", "budget:0.002", "budget:1e-06"]  # only budgets: no tier
    assert arms["budget:0.0005"]["expected_from"] == "envelope[1]"
    assert arms["budget:0.0005"]["expected_route"] == "small -> large @ 0.5"
    assert arms["budget:0.002"]["expected_from"] == "envelope[2]"
    assert arms["budget:0.002"]["answered_by"] == {"large": 6}
    assert arms["budget:0.002"]["cost_usd"]["realized"] == pytest.approx(LARGE_COST)
    below = arms["budget:1e-06"]  # below every point: the cheapest is served, marked over budget
    assert (below["expected_from"], below["expected_within_budget"], below["over_budget"]) == (
        "envelope[0]",
        False,
        6,
    )
    assert below["answered_by"] == {"small": 6}
    assert {a["served_tiers"]["budget"] for a in arms.values()} == {6}
    # The point expects quality 0.5 and cost 1e-5 for `small` alone; realized 6/6 right (Wilson
    # [0.61, 1] excludes 0.5) at exactly 2e-6 per request (a zero-width interval that excludes 1e-5).
    assert below["outside"] == ["quality", "cost_usd"]
    assert below["quality"]["high"] == 1.0
    assert (below["cost_usd"]["low"], below["cost_usd"]["high"]) == (pytest.approx(SMALL_COST),) * 2
    assert arms["budget:0.0005"]["outside"] == ["cost_usd", "escalation_rate"]  # 6/6 right includes 0.7


def test_default_tiers_are_the_policys_and_without_a_policy_the_gateways(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    policy = policy_file()
    gateway = start_replay_gateway(policy)
    prompts = write_yes_prompts(tmp_path / "yes.jsonl", 2)
    with_policy = tmp_path / "with.json"
    assert invoke(str(prompts), "-g", gateway.url, "-p", str(policy), "-o", str(with_policy)).exit_code == 0
    report = json.loads(with_policy.read_text())
    assert [a["tier"] for a in report["arms"]] == ["balanced", "chain", "direct", "mix"]

    without = tmp_path / "without.json"
    result = invoke(str(prompts), "-g", gateway.url, "-o", str(without), "--strict")
    assert result.exit_code == 0, result.output
    report = json.loads(without.read_text())
    assert [a["tier"] for a in report["arms"]] == ["balanced", "chain", "direct", "mix"]  # from /v1/models
    assert report["policy"]["policy_id"] is None and report["policy"]["matches"] is None
    assert len(report["policy"]["served_policy_ids"]) == 1
    assert all(a["quality"]["expected"] is None and a["outside"] == [] for a in report["arms"])
    assert "no --policy given" in result.stdout


def test_every_report_field_is_named_in_the_contracts_doc(
    tmp_path, repo_root, upstream, policy_file, start_replay_gateway
):
    policy = policy_file()
    gateway = start_replay_gateway(policy)
    upstream.set_default("up-small", ok("yes", confidence=0.99))
    out = tmp_path / "r.json"
    prompts = write_yes_prompts(tmp_path / "yes.jsonl", 2)
    assert (
        invoke(str(prompts), "-g", gateway.url, "-p", str(policy), "-t", "balanced", "-o", str(out)).exit_code
        == 0
    )
    report = json.loads(out.read_text())
    row = json.loads((tmp_path / "r.requests.jsonl").read_text().splitlines()[0])

    section = (repo_root / "docs" / "contracts.md").read_text().split("## Replay report", 1)[1]
    named = {word for span in re.findall(r"`([^`]+)`", section) for word in re.findall(r"[a-z_0-9]+", span)}
    assert set(report) - named == set()
    assert set(report["arms"][0]) - named == set()
    assert (
        set(report["policy"]) | set(report["arms"][0]["quality"]) | set(report["arms"][0]["latency_ms"])
        <= named
    )
    assert set(row) - named == set()


def test_streamed_replay_reports_time_to_first_token_through_a_prefix_tier(
    tmp_path, upstream, policy_file, start_replay_gateway
):
    policy = policy_file(balanced={"commit": {"rule": "prefix", "tokens": 4}})
    run = _replay_balanced(tmp_path, upstream, policy, start_replay_gateway, "--stream")
    gateway, prompts, report_path, result, report = (
        run.gateway,
        run.prompts,
        run.report_path,
        run.result,
        run.report,
    )
    [arm] = report["arms"]
    # The same realized figures as the buffered run: the final facts come from the stream's last chunk.
    assert arm["quality"]["realized"] == pytest.approx(0.7)
    assert arm["escalation_rate"]["realized"] == pytest.approx(0.4)
    assert arm["cost_usd"]["realized"] == pytest.approx((10 * SMALL_COST + 4 * LARGE_COST) / 10, rel=1e-9)
    assert arm["answered_by"] == {"small": 6, "large": 4}
    assert arm["commit"] == {"prefix": 10}
    assert 0 < arm["ttft_ms"]["p50"] <= arm["ttft_ms"]["p95"] <= arm["latency_ms"]["p95"]
    assert "first token p50" in result.stdout
    assert all(c.body["stream"] is True for c in upstream.calls("up-small"))
    results = (tmp_path / "out" / "report.requests.jsonl").read_text()
    rows = [json.loads(line) for line in results.splitlines()]
    assert all(row["stream"] is True and row["ttft_ms"] <= row["latency_ms"] for row in rows)
    # A rerun that does not stream refuses to mix its rows with these.
    rerun = invoke(str(prompts), "-g", gateway.url, "-t", "balanced", "-o", str(report_path))
    assert rerun.exit_code != 0 and "use the same options" in rerun.output

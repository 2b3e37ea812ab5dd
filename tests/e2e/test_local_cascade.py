"""End to end: `cascade serve` in front of two real llama-server models, the openai SDK as the client.

The policy is written for the test from the cheap model's own scores on the questions (threshold in
the middle of the widest gap between them), so both outcomes happen: the confident answers are
accepted, the others escalated to the larger model. The two models' servers and those scores are
the session's (``cascade_pool``, ``cheap_scores``: tests/e2e/conftest.py), shared with
test_messages_local_cascade.py. Needs scripts/setup.sh (llama-server + models).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cascade_metrics import metric_families, requests_by_outcome
from local_cascade_support import CHEAP, QUESTIONS, STRONG, chat_body, threshold_of, two_model_policy
from openai import OpenAI

from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.manifest import Manifest
from policies import save_policy
from tests.support.gateway_logs import request_lines
from tests.support.local_demo import serving_gateway
from tests.support.ports import free_port
from tests.support.readme_blocks import bash_block, run_block, scratch_checkout

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gateway's directory: its config, its policy and its log (``gateway.log``, JSON lines)."""
    return tmp_path_factory.mktemp("gateway")


@pytest.fixture(scope="module")
def gateway(cascade_pool: Manifest, cheap_scores: dict[str, float], gateway_work: Path) -> Iterator[str]:
    """`cascade serve` with a generated config and a policy whose threshold splits the questions."""
    threshold, _ = threshold_of(cheap_scores)
    work = gateway_work
    policy_path = work / "policy.json"
    save_policy(two_model_policy(threshold), policy_path)
    config = write_gateway_config(
        work / "gateway.yaml", pool_gateway_config(cascade_pool, [CHEAP, STRONG], policy_path)
    )
    with serving_gateway(config, work / "gateway.log") as url:
        yield url


def test_confident_answers_are_accepted_and_the_others_escalated(
    gateway: str, cheap_scores: dict[str, float]
) -> None:
    threshold, gap = threshold_of(cheap_scores)
    assert gap > 0.02, f"the cheap model's scores do not separate: {cheap_scores}"
    client = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=120)
    outcomes = {}
    for question in QUESTIONS:
        raw = client.chat.completions.with_raw_response.create(model="cascade", **chat_body(question))
        completion = raw.parse()
        escalated = raw.headers["x-cascade-escalated"] == "true"
        score = float(raw.headers["x-cascade-score"])
        assert float(raw.headers["x-cascade-threshold"]) == pytest.approx(threshold)
        assert escalated == (score < threshold)  # the decision rule, on the gateway's own score
        assert score == pytest.approx(cheap_scores[question], abs=0.05)  # same scorer as offline
        expected_model = STRONG if escalated else CHEAP
        assert raw.headers["x-cascade-model"] == expected_model == completion.model
        called = [CHEAP, STRONG] if escalated else [CHEAP]
        assert raw.headers["x-cascade-models-called"].split(",") == called
        assert completion.choices[0].message.content
        outcomes[question] = "escalated" if escalated else "accepted"
    assert set(outcomes.values()) == {"accepted", "escalated"}, outcomes

    families = metric_families(gateway)
    requests = requests_by_outcome(families, "chat", tier="balanced")
    assert requests.get("accepted") == list(outcomes.values()).count("accepted")
    assert requests.get("escalated") == list(outcomes.values()).count("escalated")
    escalations = [
        s.value
        for s in families["cascade_escalations"].samples
        if s.name == "cascade_escalations_total"
        and s.labels == {"tier": "balanced", "from_model": CHEAP, "to_model": STRONG}
    ]
    assert escalations == [list(outcomes.values()).count("escalated")]


def test_streamed_responses_are_accepted_and_escalated_with_the_decision_in_headers_logs_and_metrics(
    gateway: str, gateway_work: Path, cheap_scores: dict[str, float]
) -> None:
    threshold, _ = threshold_of(cheap_scores)
    client = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=120)
    outcomes: dict[str, str] = {}
    for question in QUESTIONS:
        raw = client.responses.with_raw_response.create(
            model="cascade/balanced", input=question, max_output_tokens=8, temperature=0, stream=True
        )
        escalated = raw.headers["x-cascade-escalated"] == "true"
        assert escalated == (float(raw.headers["x-cascade-score"]) < threshold)
        events = list(raw.parse())
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert events[0].type == "response.created"
        final = events[-1]
        assert final.type in ("response.completed", "response.incomplete")  # 8 tokens may cut it short
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text and final.response.output_text == text
        expected_model = STRONG if escalated else CHEAP
        assert raw.headers["x-cascade-model"] == expected_model == final.response.model
        assert final.response.usage.output_tokens > 0
        outcomes[raw.headers["x-request-id"]] = "escalated" if escalated else "accepted"
    assert set(outcomes.values()) == {"accepted", "escalated"}, outcomes

    lines = request_lines(gateway_work / "gateway.log", outcomes)  # a stream's line follows its end
    logged = {rid: entry for rid, entry in lines.items() if rid in outcomes}
    assert {rid: entry["outcome"] for rid, entry in logged.items()} == outcomes
    assert all(e["endpoint"] == "responses" and e["path"] == "/v1/responses" for e in logged.values())
    assert all(e["stream"] is True and e["tier"] == "balanced" for e in logged.values())

    requests = requests_by_outcome(metric_families(gateway), "responses")
    assert requests == {
        "accepted": list(outcomes.values()).count("accepted"),
        "escalated": list(outcomes.values()).count("escalated"),
    }


def test_readme_try_it_block_runs_as_written_against_the_two_models(
    cascade_pool: Manifest, repo_root: Path, tmp_path: Path
) -> None:
    """The README's "Try it" block, pasted: config, `cascade serve &`, wait until ready, one request.

    Only the ports change (the models listen on free ports here, not 9001 and 9002, and so does the
    gateway), so the test never meets a server someone else started on the README's ports.
    """
    block = bash_block((repo_root / "README.md").read_text(), "### Try it")
    gateway_port = free_port()
    ports = {
        "127.0.0.1:9001": f"127.0.0.1:{cascade_pool.models[CHEAP].port}",
        "127.0.0.1:9002": f"127.0.0.1:{cascade_pool.models[STRONG].port}",
        "127.0.0.1:8000": f"127.0.0.1:{gateway_port}",
        "--port 8000": f"--port {gateway_port}",
    }
    for written, used in ports.items():
        assert written in block, written
        block = block.replace(written, used)
    env = scratch_checkout(repo_root, tmp_path, ["deploy/config/policy.json"])

    result = run_block(block, tmp_path, env, timeout_s=300)

    assert result.returncode == 0, result.stdout + result.stderr
    head, _, body = result.stdout.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/1.1 200"), result.stdout + result.stderr
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    assert headers["x-cascade-tier"] == "economy"
    called = headers["x-cascade-models-called"]
    assert called in ("small", "small,large")
    assert headers["x-cascade-escalated"] == ("true" if called == "small,large" else "false")
    assert orjson.loads(body)["choices"][0]["message"]["content"]

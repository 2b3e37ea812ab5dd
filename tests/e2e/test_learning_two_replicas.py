"""End to end, for real: two replicas learn from their own traffic and switch to the recalibrated policy.

Two `cascade serve` replicas share Redis (the policy, under a key prefix of the test's own) and
PostgreSQL (the traffic store, in a schema of the test's own) in front of the local pool's real
llama-server models, with `learning: {sample_rate: 1.0, judge: numeric}`. They serve a deliberately
poor starting policy (learning_e2e_support.never_escalating_policy: the cheap fast member answers
everything, although the budget would pay for the step-by-step reference), so a recalibration on a
few dozen requests has a real gain to find and pushing is the expected outcome.

The test sends the prompts of collection/data/arithmetic-heldout.jsonl as they are (user message,
temperature 0, no max_tokens: each pool member adds its own defaults), spread over both replicas,
without any label; waits until every sample's rows are in the store; checks the sampling, shadow
spend and drift metrics of both replicas against what was sent and stored; runs `cascade
recalibrate --push`; and checks that both replicas serve the pushed policy within seconds.
Needs scripts/setup.sh (llama-server and the 1.5B model), Redis on 127.0.0.1:6379 and PostgreSQL
on 127.0.0.1:5432 (database `test`). The pool's servers are the session's (``local_pool``, free ports).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from learning_e2e_support import (
    TIER,
    calibrate_command,
    complete_queries,
    has_sample,
    metric_value,
    never_escalating_policy,
    price_sheet,
    reference_model,
    source_policy_file,
    source_tiers,
    tiers_document,
)
from replica_support import Replica, Samples, cli

from localpool.demo_config import pool_gateway_config, write_gateway_config
from localpool.manifest import Manifest, load_manifest
from policies import Policy, load_policy, save_policy
from tests.support.local_pool import LocalPool
from tests.support.postgres import POSTGRES_URL, drop_schema
from tests.support.shared_redis import REDIS_URL, delete_prefix
from tests.support.traffic_rows import stored_rows
from traffic.rows import TrafficRow

pytestmark = pytest.mark.e2e

ADMIN_KEY = "sk-admin-learning-e2e"
PROMPTS = Path("collection/data/arithmetic-heldout.jsonl")
# A few dozen requests: each sample costs a fast answer of the 1.5B model and a step-by-step one
# (seconds each on 2 cores), so the shadow calls dominate the test's time.
REQUESTS = 24
# Half of them held out: 12 queries to compare on. The starting policy agrees with the reference
# about half the time and a recalibrated one nearly always (measured: 0.667 -> 1.000 on the 12
# held-out queries; on 24-query slices of the collected runs, labelled the same way, the mean
# difference was +0.42 to +0.67), so the new policy is better on average with near certainty and
# pushing is the expected outcome. --min-queries lets a few missing labels pass.
HOLDOUT = 0.5
MIN_QUERIES = 20
# Scores per drift window before the gateway reports a PSI (each replica gets REQUESTS / 2).
DRIFT_MIN_SAMPLES = 10
SAMPLES_TIMEOUT_S = 900
SWITCH_TIMEOUT_S = 30
_HEADERS = (
    "x-request-id",
    "x-cascade-policy",
    "x-cascade-models-called",
    "x-cascade-escalated",
    "x-cascade-escalation-reason",
)


# --- fixtures: the starting policy, the pool, Redis, PostgreSQL and the replicas -----------------


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    """The pool manifest (models, members, prices) of this checkout."""
    return load_manifest()


@pytest.fixture(scope="module")
def starting_policy(repo_root: Path, manifest: Manifest, tmp_path_factory: pytest.TempPathFactory) -> Policy:
    """The never-escalating policy, from the demo policy or from a calibration of the collected runs."""
    kind, path = source_policy_file(repo_root, manifest)
    if kind == "demo":
        return never_escalating_policy(load_policy(path))
    work = tmp_path_factory.mktemp("source")
    runs = work / "runs.jsonl"
    queries, models = complete_queries(path, runs)
    assert queries >= 50, f"only {queries} complete queries in {path}"
    (work / "tiers.yaml").write_text(yaml.safe_dump(source_tiers(runs)))
    (work / "prices.yaml").write_text(yaml.safe_dump(price_sheet(manifest, models)))
    command = calibrate_command(runs, work / "tiers.yaml", work / "prices.yaml", work / "source.json")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return never_escalating_policy(load_policy(work / "source.json"))


@pytest.fixture(scope="module")
def pool(local_pool: LocalPool, starting_policy: Policy) -> Manifest:
    """The manifest with the servers of the policy's models running (the session's pool, free ports)."""
    return local_pool.serve(list(starting_policy.models))


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own on the real Redis; its keys are deleted afterwards."""
    prefix = f"cascade-e2e-{uuid.uuid4().hex[:10]}"
    yield prefix
    delete_prefix(prefix)


@pytest.fixture
def store_url() -> Iterator[str]:
    """A traffic store URL in a schema of this test's own on the real PostgreSQL; dropped afterwards."""
    schema = f"learn_e2e_{uuid.uuid4().hex[:10]}"
    yield f"{POSTGRES_URL}?schema={schema}&connect_timeout=5"
    drop_schema(schema)


@pytest.fixture
def replicas(
    pool: Manifest,
    local_pool: LocalPool,
    starting_policy: Policy,
    redis_prefix: str,
    store_url: str,
    tmp_path: Path,
) -> Iterator[list[Replica]]:
    """The starting policy pushed to Redis, then two replicas serving it with learning on."""
    policy_path = tmp_path / "starting-policy.json"
    save_policy(starting_policy, policy_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env |= {
        "CASCADE_HOME": str(local_pool.paths.home),
        "CASCADE_REDIS_PREFIX": redis_prefix,
        "CASCADE_ADMIN_KEY": ADMIN_KEY,
    }
    pushed = cli("policy", "push", str(policy_path), "--redis", REDIS_URL, env=env, timeout_s=60)
    assert pushed.returncode == 0, pushed.stderr
    config = pool_gateway_config(pool, list(starting_policy.models), policy_path)
    config |= {
        "policy": REDIS_URL,
        "redis_url": REDIS_URL,
        "drift": {"min_samples": DRIFT_MIN_SAMPLES},
        "learning": {
            "enabled": True,
            "sample_rate": 1.0,
            "reference_model": reference_model(starting_policy),
            "judge": {"kind": "numeric"},
            "store": store_url,
            "flush_interval_s": 1.0,
        },
    }
    config["limits"]["shutdown_grace_s"] = 10
    config_path = write_gateway_config(tmp_path / "gateway.yaml", config)
    started = [Replica(config_path, env, tmp_path / f"replica-{i}.log") for i in range(2)]
    try:
        for replica in started:
            replica.wait_ready()
        yield started
    finally:
        for replica in started:
            replica.stop()
            # Shown if the test failed: the warnings (a shadow call's failure says why) and the end.
            warnings = [line for line in replica.log_text().splitlines() if '"level":"warning"' in line]
            print(f"--- warnings of {replica.url} ---\n" + "\n".join(warnings[-20:]))
            print(f"--- log of {replica.url} ---\n{replica.log_tail()}")


# --- steps and checks ---------------------------------------------------------------------------


def _ask(replica: Replica, prompts: list[str]) -> list[dict[str, str]]:
    """Send the prompts one after another, as a client would: no labels, no max_tokens."""
    client = replica.client()
    answers = []
    for prompt in prompts:
        raw = client.chat.completions.with_raw_response.create(
            model="cascade", temperature=0, messages=[{"role": "user", "content": prompt}]
        )
        content = raw.parse().choices[0].message.content or ""
        answers.append({**{k: raw.headers.get(k, "") for k in _HEADERS}, "content": content})
    return answers


def _wait_for_rows(replicas: list[Replica], expected_rows: int) -> list[Samples]:
    """Until the replicas' rows written add up to ``expected_rows``; sooner when a sample was given
    up or a shadow call failed (the rows can then never add up: the checks that follow say which)."""
    deadline = time.monotonic() + SAMPLES_TIMEOUT_S
    while True:
        scrapes = [r.metrics() for r in replicas]
        written = sum(metric_value(s, "cascade_learning_rows_written_total") for s in scrapes)
        dropped = sum(metric_value(s, "cascade_learning_dropped_total") for s in scrapes)
        calls = sum(metric_value(s, "cascade_shadow_calls_total") for s in scrapes)
        failed = calls - sum(metric_value(s, "cascade_shadow_calls_total", outcome="ok") for s in scrapes)
        if written >= expected_rows or dropped or failed or time.monotonic() > deadline:
            return scrapes
        time.sleep(2)


def _check_rows(rows: list[TrafficRow], policy: Policy, request_ids: set[str]) -> set[str]:
    """One scored row per pool model and request, labelled against the reference; returns the
    queries whose every row has a label (what recalibration can use)."""
    (route,) = policy.tiers[TIER].routes
    reference = route.models[-1]
    assert len(rows) == len(request_ids) * len(policy.models), len(rows)
    assert {row.query_id for row in rows} == request_ids
    assert {(row.policy_id, row.tier) for row in rows} == {(policy.policy_id, TIER)}
    assert all(row.score is not None for row in rows)  # every answer scored: calibration keeps it
    # The reference agrees with itself; the numeric judge leaves a label missing (never wrong)
    # only when the reference answer holds no number.
    assert {(row.judge, row.correct) for row in rows if row.model == reference} == {("reference", 1.0)}
    assert {row.judge for row in rows if row.model != reference} == {"numeric"}
    labelled = {row.query_id for row in rows} - {row.query_id for row in rows if row.correct is None}
    assert len(labelled) >= MIN_QUERIES, f"only {len(labelled)} queries fully labelled"
    return labelled


def _check_sampling(scrape: Samples, sent: int, policy: Policy) -> None:
    """A replica's learning, shadow and drift metrics after ``sent`` sampled requests."""
    (route,) = policy.tiers[TIER].routes
    cheap, models = route.models[0], list(policy.models)
    assert metric_value(scrape, "cascade_learning_sampled_total", tier=TIER) == sent
    assert metric_value(scrape, "cascade_learning_dropped_total") == 0
    # A shadow call that failed or timed out ends the wait early: its outcomes say which.
    shadow = [sample for sample in scrape if sample[0] == "cascade_shadow_calls_total"]
    assert metric_value(scrape, "cascade_learning_rows_written_total") == sent * len(models), shadow
    assert metric_value(scrape, "cascade_learning_store_up") == 1
    assert metric_value(scrape, "cascade_learning_queue_depth") == 0
    assert metric_value(scrape, "cascade_shadow_calls_total", model=cheap) == 0  # its answer is reused
    for model in (m for m in models if m != cheap):
        assert metric_value(scrape, "cascade_shadow_calls_total", model=model, outcome="ok") == sent, model
        assert metric_value(scrape, "cascade_shadow_calls_total", model=model) == sent, model
        assert metric_value(scrape, "cascade_shadow_cost_usd_total", model=model) > 0, model
    # The window holds the same spend in whole nano-USD, each sample's settled cost rounded up.
    shadow_spend = metric_value(scrape, "cascade_shadow_cost_usd_total")
    window = metric_value(scrape, "cascade_shadow_spend_window_usd")
    assert shadow_spend - 1e-12 <= window <= shadow_spend + sent * 1e-9 + 1e-12, (window, shadow_spend)
    assert metric_value(scrape, "cascade_judge_outcomes_total", judge="numeric") == sent * (len(models) - 1)
    assert metric_value(scrape, "cascade_judge_outcomes_total", outcome="no_reference") == 0
    # Drift: the window holds one score of the cheap model per request, and now a PSI.
    assert metric_value(scrape, "cascade_score_drift_samples", tier=TIER, model=cheap) == sent
    psi = metric_value(scrape, "cascade_score_drift_psi", tier=TIER, model=cheap)
    assert math.isfinite(psi) and psi >= 0, psi


def _check_money(rows: list[TrafficRow], scrapes: list[Samples], cheap: str) -> None:
    """Every stored row's cost is counted once: the cheap model's answers as the clients' spend,
    the others as shadow spend, never mixed."""
    for model in {row.model for row in rows}:
        stored = sum(row.cost_usd for row in rows if row.model == model)
        counter = "cascade_cost_usd_total" if model == cheap else "cascade_shadow_cost_usd_total"
        counted = sum(metric_value(s, counter, model=model) for s in scrapes)
        assert stored == pytest.approx(counted, rel=1e-9), model
        if model == cheap:
            assert sum(metric_value(s, "cascade_shadow_cost_usd_total", model=model) for s in scrapes) == 0


def _recalibrate(store_url: str, policy: Policy, redis_prefix: str, work: Path) -> tuple[dict[str, Any], str]:
    """`cascade recalibrate --push` against the served policy's objective; (report, output)."""
    (work / "tiers.yaml").write_text(yaml.safe_dump(tiers_document(policy)))
    report_path = work / "recalibrate.json"
    result = cli(
        "recalibrate", "--store", store_url, "--tiers", str(work / "tiers.yaml"), "--push", REDIS_URL,
        "--holdout", str(HOLDOUT), "--min-queries", str(MIN_QUERIES), "--seed", "0",
        "-o", str(work / "recalibrated.json"), "--json", str(report_path),
        env={"CASCADE_REDIS_PREFIX": redis_prefix},
        timeout_s=600,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return json.loads(report_path.read_text()), output


def test_replicas_sample_their_traffic_and_serve_the_recalibrated_policy(
    repo_root: Path,
    replicas: list[Replica],
    starting_policy: Policy,
    store_url: str,
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    cheap = starting_policy.tiers[TIER].routes[0].models[0]
    prompts_file = repo_root / PROMPTS
    assert prompts_file.is_file(), f"{PROMPTS} is missing (python -m collection.arithmetic writes it)"
    prompts = [json.loads(line)["prompt"] for line in prompts_file.read_text().splitlines()[:REQUESTS]]
    assert len(prompts) == REQUESTS

    # Before any traffic: nothing sampled, the drift window empty (PSI NaN), the store up.
    for before in (r.metrics() for r in replicas):
        assert metric_value(before, "cascade_learning_sampled_total") == 0
        assert metric_value(before, "cascade_learning_store_up") == 1
        assert metric_value(before, "cascade_score_drift_samples", tier=TIER, model=cheap) == 0
        assert has_sample(before, "cascade_score_drift_psi", tier=TIER, model=cheap)
        assert math.isnan(metric_value(before, "cascade_score_drift_psi", tier=TIER, model=cheap))

    # Free-form questions without labels, spread over both replicas.
    shares = [prompts[0::2], prompts[1::2]]
    with ThreadPoolExecutor(max_workers=2) as executor:
        by_replica = list(executor.map(_ask, replicas, shares))
    answers = [a for per_replica in by_replica for a in per_replica]
    reference = starting_policy.tiers[TIER].routes[0].models[-1]
    sent_at = time.monotonic()
    for answer in answers:
        assert answer["x-cascade-policy"] == starting_policy.policy_id, answer
        # It never escalates on its score; an answer cut at the member's own cap escalates whatever
        # the threshold (`truncated`: the stage did not finish), to the reference.
        escalated = answer["x-cascade-escalated"] == "true"
        assert not escalated or answer["x-cascade-escalation-reason"] == "truncated", answer
        assert answer["x-cascade-models-called"] == (f"{cheap},{reference}" if escalated else cheap), answer
        assert answer["content"].strip(), answer
    request_ids = {a["x-request-id"] for a in answers}
    assert len(request_ids) == REQUESTS

    # Every sample's rows reach the store; the metrics moved by exactly what each replica was sent.
    scrapes = _wait_for_rows(replicas, REQUESTS * len(starting_policy.models))
    stored_at = time.monotonic()
    for scrape, sent in zip(scrapes, shares, strict=True):
        _check_sampling(scrape, len(sent), starting_policy)
    rows = stored_rows(store_url)
    labelled = _check_rows(rows, starting_policy, request_ids)
    _check_money(rows, scrapes, cheap)

    # Recalibrate on the sampled traffic and push.
    report, output = _recalibrate(store_url, starting_policy, redis_prefix, tmp_path)
    pushed_at = time.monotonic()
    new_policy = load_policy(tmp_path / "recalibrated.json")
    assert report["current_policy"]["policy_id"] == starting_policy.policy_id, report["current_policy"]
    data = report["data"]
    assert data["complete_queries"] == len(labelled) and data["heldout_queries"] > 0, data
    assert data["calibration_queries"] + data["heldout_queries"] == len(labelled), data
    tier = report["tiers"][TIER]
    assert tier["current"]["escalation_rate"]["mean"] == 0, tier  # held out, it never escalated either
    assert tier["difference"]["quality"]["mean"] > 0, tier  # better than never escalating
    decision = report["decision"]
    assert tier["ok"] and decision["accepted"] and decision["pushed"] and decision["version"] == 2, decision
    assert f"Pushed {new_policy.policy_id}" in output, output

    # Both replicas switch within the watcher's resync, and serve the new policy.
    deadline = time.monotonic() + SWITCH_TIMEOUT_S
    while {r.served_policy(ADMIN_KEY) for r in replicas} != {new_policy.policy_id}:
        assert time.monotonic() < deadline, [r.served_policy(ADMIN_KEY) for r in replicas]
        time.sleep(0.2)
    switched_at = time.monotonic()
    for replica in replicas:
        assert metric_value(replica.metrics(), "cascade_policy_info", policy_id=new_policy.policy_id) == 1
        raw = replica.client().chat.completions.with_raw_response.create(
            model="cascade", temperature=0, messages=[{"role": "user", "content": prompts[0]}]
        )
        assert raw.headers["x-cascade-policy"] == new_policy.policy_id
    print(
        f"\n{REQUESTS} requests sent in {sent_at - started:.1f} s; every sample stored "
        f"{stored_at - sent_at:.1f} s later; recalibrated and pushed in {pushed_at - stored_at:.1f} s; "
        f"both replicas switched within {switched_at - pushed_at:.2f} s; held-out agreement "
        f"{tier['current']['quality']['mean']:.3f} -> {tier['new']['quality']['mean']:.3f} "
        f"(difference low {tier['difference']['quality']['low']:+.3f}), cost per query "
        f"${tier['current']['cost_usd']['mean']:.3g} -> ${tier['new']['cost_usd']['mean']:.3g}"
    )

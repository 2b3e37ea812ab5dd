"""``cascade recalibrate`` on real traffic stores (JSONL file, PostgreSQL) pushing to the real Redis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recalibrate_support import policy_from, push_to, served, traffic
from typer.testing import CliRunner

from calibration.commands.recalibrate_cli import REFUSED_EXIT_CODE
from calibration.splits import stratified_splits
from cascade_cli.main import app
from policies import load_policy
from policies.benefit import FEATURES
from policies.benefit_schema import BenefitSpec
from policies.schema import ScorerSpec
from publishing import PolicyKeys, push_policy
from tests.support.shared_redis import REDIS_URL
from tests.support.traffic_kinds import store_rows, tiers_file

# store_url (postgres and file): the shared plugin tests/support/traffic_stores.py;
# keys and client (a private Redis prefix, a client): conftest.py.
runner = CliRunner()


def recalibrate(store: str, tmp_path: Path, *extra: str) -> Any:
    args = ["recalibrate", "--store", store, "--tiers", str(tiers_file(tmp_path / "tiers.yaml")), *extra]
    return runner.invoke(app, args)


def test_without_a_served_policy_the_new_one_is_compared_with_none_and_pushed(
    store_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    store_rows(store_url, traffic(400, seed=1))
    report = tmp_path / "report.json"
    output = tmp_path / "new.json"
    result = recalibrate(store_url, tmp_path, *push_to(keys), "-o", str(output), "--json", str(report))
    assert result.exit_code == 0, result.output
    new = load_policy(output)
    assert served(client, keys) == (new.policy_id, "1")
    document = json.loads(report.read_text())
    assert document["current_policy"] is None
    assert document["decision"] == {
        "accepted": True,
        "reason": None,
        "pushed": True,
        "version": 1,
        "target": REDIS_URL,
    }
    assert document["data"]["calibration_queries"] == 200 and document["data"]["heldout_queries"] == 200
    for tier in document["tiers"].values():
        assert tier["current"] is None and tier["difference"] is None
        for metric in ("quality", "cost_usd", "escalation_rate"):
            interval = tier["new"][metric]
            assert interval["low"] <= interval["mean"] <= interval["high"]
    assert "none" in result.output


def test_a_new_policy_better_than_the_served_one_replaces_it(
    store_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    # The served policy was calibrated on labels from a broken judge (coin flips): its routes are
    # arbitrary. Fresh traffic with real labels calibrates a policy that is better on held-out queries.
    coin = traffic(2000, seed=5, label=lambda q, model, agrees: float((q * 7 + len(model)) % 2))
    current = policy_from(coin, tmp_path / "current.json")
    push_policy(client, current, keys)
    store_rows(store_url, traffic(600, seed=2))
    report = tmp_path / "report.json"
    result = recalibrate(store_url, tmp_path, *push_to(keys), "--json", str(report))
    assert result.exit_code == 0, result.output
    document = json.loads(report.read_text())
    assert document["current_policy"]["policy_id"] == current.policy_id
    new_id = document["new_policy"]["policy_id"]
    assert new_id != current.policy_id
    assert served(client, keys) == (new_id, "2")
    assert json.loads(client.get(keys.recalibration_last)) == document  # the console's Policy page reads it
    gains = []
    for tier in document["tiers"].values():
        assert tier["ok"] and all(check["ok"] for check in tier["checks"])
        difference = tier["difference"]["quality"]
        # Paired: the difference's mean is the difference of the means, its interval its own.
        assert difference["mean"] == pytest.approx(
            tier["new"]["quality"]["mean"] - tier["current"]["quality"]["mean"]
        )
        assert difference["low"] <= difference["mean"] <= difference["high"]
        gains.append(difference["mean"])
    assert max(gains) > 0.05


def test_a_new_policy_misled_by_its_calibration_labels_is_refused(
    store_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    # The served policy comes from plenty of well-labelled traffic. In the new window the judge said
    # "agrees" to every answer of exactly the queries the command will calibrate on (the split is
    # the documented one: child 0 of SeedSequence(seed)), so the new policy believes the small model
    # is as good as the reference; the held-out queries, labelled properly, show it is not.
    current = policy_from(traffic(3000, seed=9, prefix="old"), tmp_path / "current.json")
    push_policy(client, current, keys)
    n, seed = 400, 3
    calibration_half = set(
        stratified_splits(n, n_splits=1, test_fraction=0.5, seed=seed)[0].calibration.tolist()
    )
    misled = traffic(
        n, seed=4, label=lambda q, model, agrees: 1.0 if q in calibration_half or agrees else 0.0
    )
    store_rows(store_url, misled)
    report = tmp_path / "report.json"
    output = tmp_path / "new.json"
    result = recalibrate(
        store_url, tmp_path, *push_to(keys), "--seed", str(seed), "-o", str(output), "--json", str(report)
    )
    assert result.exit_code == REFUSED_EXIT_CODE, result.output
    assert served(client, keys) == (current.policy_id, "1")  # untouched
    refusal = [line for line in result.output.splitlines() if line.startswith("refused: ")]
    assert len(refusal) == 1 and "quality" in refusal[0]
    assert output.is_file()  # written for inspection, not pushed
    document = json.loads(report.read_text())
    assert document["decision"]["accepted"] is False and document["decision"]["pushed"] is False
    assert document["decision"]["reason"] == refusal[0].removeprefix("refused: ")
    failed = [t for t in document["tiers"].values() if not t["ok"]]
    assert failed
    for tier in failed:
        assert tier["difference"]["quality"]["high"] < 0
    assert set(load_policy(output).tiers["economy"].routes[0].models) == {"small"}


def test_too_few_complete_queries_is_an_error(file_url: str, tmp_path: Path) -> None:
    rows = traffic(60, seed=1)
    rows = [r for r in rows if not (r.model == "medium" and r.query_id.endswith("7"))]  # 6 incomplete
    store_rows(file_url, rows)
    result = recalibrate(file_url, tmp_path)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "error: only 54 complete queries with a score (6 incomplete dropped; 'medium' lacks a labelled row "
        "in 6 of 60 queries); recalibrate needs at least 100 (--min-queries)"
    )


def test_a_model_without_rows_is_named(file_url: str, tmp_path: Path) -> None:
    current = policy_from(traffic(300, seed=1), tmp_path / "current.json")
    store_rows(file_url, [r for r in traffic(300, seed=2) if r.model != "large"])
    result = recalibrate(file_url, tmp_path, "--current", str(tmp_path / "current.json"))
    assert result.exit_code == 1
    assert (
        f"error: the current policy {current.policy_id} routes to large, which the exported traffic has no"
        in (" ".join(result.output.split()))
    )
    named = recalibrate(file_url, tmp_path, "--models", "small,medium,large")
    assert named.exit_code == 1
    assert "'large' lacks a labelled row in 300 of 300 queries" in " ".join(named.output.split())


BENEFIT = BenefitSpec(
    scored="small",
    escalates_to="medium",
    features=list(FEATURES),
    mean=[0.5] * len(FEATURES),
    scale=[0.25] * len(FEATURES),
    coefficients=[-1.0] * len(FEATURES),
    intercept=0.2,
    knots_x=[-2.0, 0.0, 3.0],
    knots_y=[0.2, 0.5, 0.95],
    fitted_on=200,
    helps=40,
)


@pytest.mark.parametrize(
    ("scorer", "calibrate"),
    [
        ({"name": "escalation_benefit", "benefit": BENEFIT}, "cascade calibrate --benefit-scorer"),
        ({"name": "min_probability"}, "cascade calibrate"),
    ],
)
def test_a_current_policy_with_a_tier_of_its_own_scorer_is_refused_with_the_way_out(
    file_url: str, tmp_path: Path, scorer: dict[str, Any], calibrate: str
) -> None:
    current = policy_from(traffic(300, seed=1), tmp_path / "plain.json")
    economy = current.tiers["economy"].model_copy(
        update={"scorer": ScorerSpec(top_k=current.scorer.top_k, **scorer)}
    )
    document = current.model_dump(mode="json", exclude_none=True)
    document["tiers"]["economy"] = economy.model_dump(mode="json", exclude_none=True)
    (tmp_path / "current.json").write_text(json.dumps(document))
    with_own = load_policy(tmp_path / "current.json")
    store_rows(file_url, traffic(300, seed=2))
    result = recalibrate(file_url, tmp_path, "--current", str(tmp_path / "current.json"))
    assert result.exit_code == 1
    assert " ".join(result.output.split()) == (
        f"error: the current policy {with_own.policy_id} serves tier economy with its own scorer "
        f"'{scorer['name']}', which recalibrate does not refit or compare: export the traffic (cascade "
        f"traffic export) and run {calibrate} on it"
    )


def test_a_store_or_redis_it_cannot_reach_is_one_error_line(file_url: str, tmp_path: Path) -> None:
    down = recalibrate("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", tmp_path)
    assert down.exit_code == 1
    assert down.output.startswith("error: traffic store postgresql://postgres@127.0.0.1:1/test")
    store_rows(file_url, traffic(200, seed=1))
    no_redis = recalibrate(file_url, tmp_path, "--push", "redis://127.0.0.1:1/0")
    assert no_redis.exit_code == 1
    assert no_redis.output.startswith("error: cannot reach Redis at redis://127.0.0.1:1/0")
    assert "Traceback" not in down.output + no_redis.output


def test_a_current_file_other_than_the_served_policy_is_refused_before_any_work(
    file_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    served_policy = policy_from(traffic(300, seed=1), tmp_path / "served.json")
    other = policy_from(traffic(300, seed=2), tmp_path / "other.json")
    push_policy(client, served_policy, keys)
    store_rows(file_url, traffic(200, seed=3))
    result = recalibrate(file_url, tmp_path, "--current", str(tmp_path / "other.json"), *push_to(keys))
    assert result.exit_code == 1
    assert f"is policy {other.policy_id} but" in result.output and served_policy.policy_id in result.output
    assert served(client, keys) == (served_policy.policy_id, "1")


def test_without_push_nothing_is_pushed_and_a_passing_policy_exits_zero(
    file_url: str, tmp_path: Path
) -> None:
    store_rows(file_url, traffic(300, seed=2))
    result = recalibrate(file_url, tmp_path)
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].endswith("is not worse than none (not pushed: no --push)")

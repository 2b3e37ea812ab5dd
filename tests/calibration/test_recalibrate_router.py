"""``cascade recalibrate`` refits a policy's router on sampled traffic (the features the gateway
stored with each sample), on the real traffic stores, pushing to the real Redis only if not worse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from recalibrate_support import (
    ROUTED_TIERS,
    push_to,
    routed_policy_from,
    routed_prompt,
    routed_traffic,
    served,
)
from typer.testing import CliRunner

from calibration.commands.recalibrate_cli import REFUSED_EXIT_CODE
from calibration.splits import stratified_splits
from cascade_cli.main import app
from policies import load_policy
from policies.route_features import cheap_features
from policies.router import LinearRouter, routed_choice
from policies.schema import Policy
from publishing import PolicyKeys, push_policy
from tests.support.traffic_kinds import store_rows, tiers_file

# postgres_url: the shared plugin tests/support/traffic_stores.py; keys, client: conftest.py.
runner = CliRunner()
SPLITS = "5"  # held-out splits of the mechanism choice: enough to tell these mechanisms apart


def recalibrate(store: str, tmp_path: Path, keys: PolicyKeys, *extra: str) -> Any:
    args = [
        "recalibrate",
        "--store",
        store,
        "--tiers",
        str(tiers_file(tmp_path / "tiers.yaml", ROUTED_TIERS)),
        "--heldout-splits",
        SPLITS,
        *push_to(keys),
        *extra,
    ]
    return runner.invoke(app, args)


def routed_to(policy: Policy, tier: str, text: str) -> str:
    """The model a routed tier of ``policy`` sends ``text`` to, as the gateway decides it."""
    spec = policy.router
    routing = policy.tiers[tier].routing
    assert spec is not None and routing is not None and routing.mechanism == "routed"
    assert routing.price_weight is not None
    router = LinearRouter(
        spec.features, tuple(spec.models), np.asarray(spec.coef), np.asarray(spec.intercept)
    )
    p = router.probabilities(cheap_features(text, 0, "text"))
    return router.models[routed_choice(p, spec.cost_usd, routing.price_weight)]


def routed_tiers(policy: Policy) -> dict[str, str]:
    return {name: t.routing.mechanism for name, t in policy.tiers.items() if t.routing is not None}


def test_a_refitted_router_better_held_out_replaces_the_served_one(
    postgres_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    # The served router was fitted on labels from a broken judge that had the small model right on
    # exactly the hard questions: it sends the hard ones to small. Fresh traffic, sampled with the
    # features the gateway computed, refits it the right way round; held out it is much better.
    inverted = routed_traffic(
        600,
        seed=7,
        prefix="old",
        label=lambda q, model, agrees: float(not agrees) if model == "small" else float(agrees),
    )
    current = routed_policy_from(inverted, tmp_path / "current.json")
    assert routed_tiers(current)["economy"] == "routed"
    assert routed_to(current, "economy", routed_prompt(1, hard=True)) == "small"
    push_policy(client, current, keys)
    store_rows(postgres_url, routed_traffic(400, seed=2))  # the route column through PostgreSQL

    report, output = tmp_path / "report.json", tmp_path / "new.json"
    result = recalibrate(postgres_url, tmp_path, keys, "--json", str(report), "-o", str(output))

    assert result.exit_code == 0, result.output
    new = load_policy(output)
    assert served(client, keys) == (new.policy_id, "2")
    assert new.router is not None and new.router.features == "cheap-v1"
    assert routed_tiers(new)["economy"] == "routed"
    assert routed_to(new, "economy", routed_prompt(1, hard=True)) != "small"
    assert routed_to(new, "economy", routed_prompt(2, hard=False)) == "small"
    economy = json.loads(report.read_text())["tiers"]["economy"]
    assert economy["ok"] and economy["new"]["mechanism"] == economy["current"]["mechanism"] == "routed"
    assert "router, price weight" in result.output  # the routes table names the mechanism
    # Both scored as their routers serve them, on the same held-out queries.
    assert economy["difference"]["quality"]["low"] > 0.2
    assert economy["new"]["escalation_rate"]["mean"] == 0.0  # one call per routed request


def test_a_refit_worse_held_out_is_refused_and_the_served_router_stays(
    postgres_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    # The served router comes from plenty of well-labelled traffic. In the new window the judge said
    # "agrees" to the small model on exactly the queries the command calibrates on (the documented
    # split: child 0 of SeedSequence(seed)): the refitted router believes small is always right and
    # sends everything there; the held-out queries, labelled properly, show it is not.
    current = routed_policy_from(routed_traffic(800, seed=9, prefix="old"), tmp_path / "current.json")
    assert routed_tiers(current)["economy"] == "routed"
    push_policy(client, current, keys)
    n, seed = 400, 3
    calibration_half = set(
        stratified_splits(n, n_splits=1, test_fraction=0.5, seed=seed)[0].calibration.tolist()
    )
    misled = routed_traffic(
        n,
        seed=4,
        label=lambda q, model, agrees: 1.0 if (q in calibration_half and model == "small") or agrees else 0.0,
    )
    store_rows(postgres_url, misled)
    report, output = tmp_path / "report.json", tmp_path / "new.json"

    result = recalibrate(
        postgres_url, tmp_path, keys, "--seed", str(seed), "--json", str(report), "-o", str(output)
    )

    assert result.exit_code == REFUSED_EXIT_CODE, result.output
    assert served(client, keys) == (current.policy_id, "1")  # untouched
    refusal = [line for line in result.output.splitlines() if line.startswith("refused: ")]
    assert len(refusal) == 1 and "quality" in refusal[0]
    # Written for inspection, not pushed: believing small always right, it serves economy by small
    # alone (a tie with the refitted router, which goes to the cascade).
    economy_tier = load_policy(output).tiers["economy"]
    assert economy_tier.routing is None and [r.models for r in economy_tier.routes] == [["small"]]
    economy = json.loads(report.read_text())["tiers"]["economy"]
    assert not economy["ok"] and economy["difference"]["quality"]["high"] < 0


def test_a_routed_policy_cannot_be_compared_on_traffic_without_its_features(
    postgres_url: str, keys: PolicyKeys, client: Any, tmp_path: Path
) -> None:
    from dataclasses import replace

    current = routed_policy_from(routed_traffic(300, seed=9, prefix="old"), tmp_path / "current.json")
    push_policy(client, current, keys)
    store_rows(postgres_url, [replace(row, route=None) for row in routed_traffic(200, seed=2)])

    result = recalibrate(postgres_url, tmp_path, keys)

    assert result.exit_code == 1
    assert "only 0 sampled text queries carry its features" in result.output
    assert served(client, keys) == (current.policy_id, "1")

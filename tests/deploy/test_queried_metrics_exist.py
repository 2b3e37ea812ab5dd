"""Every metric the dashboard and the alert rules query exists in a real gateway's /metrics output.

The gateway runs the shipped example config and policy (deploy/config/) against the scripted
upstream, with learning on; requests of every outcome make the labelled series exist (and, once
sampled, the learning series); /metrics is scraped over HTTP and parsed with prometheus_client.
"""

from __future__ import annotations

import re
import time

import httpx
import openai
import pytest
from deploy_support import (
    TARGET_LABELS,
    Family,
    dashboard_expressions,
    metric_names,
    resolve,
    rule_expressions,
    scrape_families,
    selector_labels,
)
from prometheus_client.parser import text_string_to_metric_families

RECORDED = {name for name, _ in rule_expressions() if name.startswith("cascade:")}
QUERIES = [("rule", name, expr) for name, expr in rule_expressions()] + [
    ("dashboard", name, expr) for name, expr in dashboard_expressions()
]


@pytest.fixture(scope="module")
def scrape(example_gateway) -> dict[str, Family]:
    client = openai.OpenAI(base_url=example_gateway.url + "/v1", api_key="unused", max_retries=0)
    ask = [{"role": "user", "content": "What is 2+2?"}]
    hard = [{"role": "user", "content": "A hard question: what is 2+2?"}]
    client.chat.completions.create(model="cascade", messages=ask)  # accepted
    client.chat.completions.create(model="cascade", messages=hard)  # escalated
    client.chat.completions.create(model="cascade/economy", messages=hard)  # escalated, other tier
    client.chat.completions.create(model="cascade/quality", messages=ask)  # direct (single-model route)
    client.chat.completions.create(model="small", messages=ask)  # passthrough
    # A final stage whose text answer fails the JSON check: returned, counted as invalid.
    client.chat.completions.create(
        model="cascade/quality", messages=ask, response_format={"type": "json_object"}
    )
    client.chat.completions.create(
        model="cascade",
        messages=ask,  # numeric budget
        extra_headers={"X-Cascade-Max-Cost-Usd": "0.00003"},
    )
    for _ in client.chat.completions.create(model="cascade", messages=hard, stream=True):
        pass  # escalated and streamed live from the large model
    for question in (ask, hard):  # the economy tier decides streams on a prefix: committed, then cancelled
        for _ in client.chat.completions.create(model="cascade/economy", messages=question, stream=True):
            pass
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="cascade/no-such-tier", messages=ask)  # error
    return scrape_families(_after_sampling(example_gateway.url))


def _after_sampling(url: str, timeout_s: float = 20.0) -> str:
    """/metrics once the sampler has worked off the requests above (their shadow calls, labels and
    rows make the learning series exist)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = httpx.get(url + "/metrics", timeout=5)
        assert response.status_code == 200
        samples = {
            sample.name: sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if not sample.labels
        }
        written = samples.get("cascade_learning_rows_written_total", 0.0)
        if (written > 0 and samples.get("cascade_learning_queue_depth") == 0) or time.monotonic() > deadline:
            return response.text
        time.sleep(0.1)


def test_scrape_has_every_outcome_the_queries_select_on(scrape) -> None:
    outcomes = {
        value
        for kind, name, expr in QUERIES
        for match in re.findall(r'outcome\s*[!=]~?\s*"([^"]*)"', expr)
        for value in match.split("|")
    }
    assert outcomes >= {"accepted", "escalated", "direct", "error"}
    requests = scrape["cascade_requests"]
    assert requests.kind == "counter"
    seen = requests.values["outcome"]
    assert outcomes <= seen, f"outcomes queried but never exported: {outcomes - seen}"
    assert {"balanced", "economy", "quality", "budget"} <= requests.values["tier"]


def test_scrape_has_the_policy_expectation_of_every_tier(scrape) -> None:
    import json

    from deploy_support import DEPLOY

    policy = json.loads((DEPLOY / "config" / "policy.json").read_text())
    assert scrape["cascade_expected_escalation_rate"].values["tier"] == set(policy["tiers"])
    assert scrape["cascade_policy_info"].values["policy_id"] == {policy["policy_id"]}


@pytest.mark.parametrize(("source", "name", "expr"), QUERIES, ids=[f"{s}:{n}" for s, n, _ in QUERIES])
def test_queried_metric_exists_in_the_gateway_scrape(scrape, source: str, name: str, expr: str) -> None:
    names = metric_names(expr) - {"up"}  # `up` is Prometheus's own series for every target
    recorded = set(re.findall(r"(?<![\w:])cascade:[a-z0-9_:]+", expr))
    assert recorded <= RECORDED, f"{source} {name!r} reads undefined recording rules {recorded - RECORDED}"
    if name.startswith("cascade:spend_budget"):
        assert names == set()  # a constant, configured by the operator
        return
    assert names or recorded or "up" in metric_names(expr), f"{source} {name!r} reads no series: {expr}"
    for metric in names:
        resolved = resolve(metric, scrape)
        assert resolved is not None, (
            f"{source} {name!r} queries {metric}, which the gateway does not export "
            f"(exported families: {sorted(scrape)})"
        )
        family_name, family = resolved
        assert metric in family.samples, f"{metric}: no such sample in family {family_name}"
    for metric, labels in selector_labels(expr).items():
        if metric == "up":
            continue
        _, family = resolve(metric, scrape)
        missing = labels - family.labels - TARGET_LABELS
        assert not missing, f"{source} {name!r} filters {metric} on labels it does not have: {missing}"

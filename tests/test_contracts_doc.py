"""docs/contracts.md names what the code exports: metrics and their labels, headers, config fields,
Redis keys, policy fields, scorers and price fields. A rename in the code without the doc fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter, Gauge, Histogram
from pydantic import BaseModel

from gateway.api.edges.messages_response import ERROR_TYPES
from gateway.config.drift import ScoreDriftMonitor
from gateway.config.settings import Settings
from gateway.config.shift_alarm import ShiftAlarms
from gateway.keys.spend_store import MAX_NANO
from gateway.redis.keys import RedisKeys
from gateway.routing.routed_tiers import RouterRuntime
from gateway.telemetry.metrics import GatewayMetrics
from gateway.wire.facts import CascadeFacts
from money import Price
from money.charges import (
    CHOICE_FIELDS,
    COMPLETION_CAP_FIELDS,
    DEFAULT_COMPLETION_BOUND,
    TEMPLATE_FIELDS,
    TEMPLATE_TOKENS,
)
from policies import SCORERS, Policy, Tier
from policies.schema import EnvelopePoint, Route
from policies.scorers import REGISTRY
from traffic.rows import COLUMNS as TRAFFIC_COLUMNS
from traffic.rows import FILTER_COLUMNS as TRAFFIC_FILTER_COLUMNS


@pytest.fixture(scope="module")
def sections(repo_root: Path) -> dict[str, str]:
    """The doc's ``## `` sections by title."""
    text = (repo_root / "docs" / "contracts.md").read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def table_rows(section: str) -> dict[str, str]:
    """First backticked cell of each table row -> the rest of the row."""
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|(.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def documented_labels(cell: str) -> list[str]:
    """Label names in a metric row's labels cell: backticked words not following ``=`` or ``|``."""
    labels = []
    for match in re.finditer(r"`(\w+)`", cell):
        before = cell[: match.start()].rstrip()
        if not before.endswith(("=", "\\|")):
            labels.append(match.group(1))
    return labels


def exported_metrics() -> dict[str, Any]:
    """Exposition name -> metric object, for every metric GatewayMetrics registers (learning's and the
    routed tiers' too)."""
    metrics = GatewayMetrics(with_redis=True, with_learning=True)
    routed = RouterRuntime(metrics)
    found = {}
    for value in [*vars(metrics).values(), *vars(metrics.learning).values(), *vars(routed).values()]:
        if isinstance(value, Counter | Gauge | Histogram):
            (family,) = value.describe()
            found[family.name + ("_total" if family.type == "counter" else "")] = value
        elif isinstance(value, ScoreDriftMonitor | ShiftAlarms):
            # A custom collector (computed at scrape time): its families, label names fixed.
            for family in value.describe():
                found[family.name] = Gauge(
                    family.name, family.documentation, family._labelnames, registry=None
                )
    return found


def test_every_exported_metric_is_documented_with_its_type_and_exact_labels(sections: dict[str, str]) -> None:
    rows = table_rows(sections["Metrics"])
    exported = exported_metrics()
    assert set(rows) == set(exported)
    for name, metric in exported.items():
        kind, labels_cell = rows[name].split("|")[0].strip(), rows[name].split("|", 1)[1]
        assert kind == metric.describe()[0].type, name
        labels = documented_labels(labels_cell)
        if labels:
            metric.labels(**dict.fromkeys(labels, "x"))  # ValueError unless exactly these labels
        else:
            with pytest.raises(ValueError, match="No label names"):
                metric.labels(x="x")


def test_every_response_header_is_documented(sections: dict[str, str]) -> None:
    facts = CascadeFacts(
        "balanced", "p1", degraded=True, within_budget=False, mechanism="routed", router_probability=0.5
    )
    facts.commit_rule, facts.commit_tokens = "prefix", 16  # every optional header at once
    emitted = {name.decode() for name, _ in facts.headers(0.1)}
    documented = set(table_rows(sections["Response headers"]))
    assert emitted | {"x-request-id"} == documented


def test_every_x_cascade_header_named_in_the_gateway_code_is_documented(
    repo_root: Path, sections: dict[str, str]
) -> None:
    documented = (sections["Choosing the route"] + sections["Response headers"]).lower()
    named = {
        header.lower()
        for path in (repo_root / "gateway").rglob("*.py")
        for header in re.findall(r"x-cascade-[a-z-]*[a-z]", path.read_text(), flags=re.I)
    }
    assert len(named) >= 11
    for header in named:
        assert f"`{header}" in documented, header


def config_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted config field paths (``models.*.base_url``); a price is one field (see Prices)."""
    paths = set()
    for name, field in model.model_fields.items():
        path = prefix + name
        annotation = field.annotation
        item = getattr(annotation, "__args__", (None, None))[-1] if path == "models" else None
        if isinstance(item, type) and issubclass(item, BaseModel):
            paths |= {path} | config_paths(item, path + ".*.")
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation is not Price:
            paths |= config_paths(annotation, path + ".")
        else:
            paths.add(path)
    return paths


def test_every_config_field_is_documented(sections: dict[str, str]) -> None:
    assert config_paths(Settings) == set(table_rows(sections["Config"]))


def test_redis_keys_are_documented(sections: dict[str, str]) -> None:
    keys = RedisKeys()
    names = {keys.policy_current, keys.policy_version, keys.policy_updates, keys.client_keys}
    names.add(keys.spend("<key_id>", "<window_start>"))  # type: ignore[arg-type]
    names.add(keys.spend_pending("<key_id>", "<window_start>"))  # type: ignore[arg-type]
    names |= {keys.spend_cancelled("<id>"), keys.spend_applied("<id>"), keys.spend_epoch, keys.replicas}
    names.add(keys.rate("<key_id>", "<window_s>", "<window_start>"))  # type: ignore[arg-type]
    names.add(keys.breaker("<model>"))
    names.add(keys.shift_alarms("<policy_id>"))
    names |= {keys.console_replicas, keys.console_snapshot("<id>"), keys.recalibration_last}
    names |= {keys.console_key_spend("<minute_start>"), keys.console_key_spend_taken("<minute_start>")}  # type: ignore[arg-type]
    names |= {keys.console_requests, keys.console_index}
    assert names == set(table_rows(sections["Redis keys"]))


def test_policy_fields_and_prices_are_documented(sections: dict[str, str]) -> None:
    policy = sections["Policy file"]
    assert set(Policy.model_fields) == set(table_rows(policy))
    for model in (Tier, Route, EnvelopePoint):
        for name in model.model_fields:
            assert re.search(rf"\b{name}\b", policy), name
    assert set(Price.model_fields) == set(table_rows(sections["Prices"]))


def test_the_scorer_tables_are_the_registry(sections: dict[str, str]) -> None:
    rows = table_rows(sections["Scorers"])
    assert set(REGISTRY) == set(rows)
    assert set(SCORERS) <= set(REGISTRY)
    for name, definition in REGISTRY.items():
        needs, score_range = (cell.strip() for cell in rows[name].split("|")[:2])
        low, high = (f"{bound:g}" for bound in definition.score_range)
        assert (needs, score_range) == (definition.needs, f"[{low}, {high}]"), name


def test_every_traffic_row_column_is_documented(sections: dict[str, str]) -> None:
    section = sections["Learning from traffic"]
    documented: set[str] = set()
    for line in section.splitlines():  # a row's first cell may name several columns: `a`, `b`
        match = re.match(r"\|\s*((?:`\w+`,?\s*)+)\|", line)
        if match:
            documented |= set(re.findall(r"`(\w+)`", match.group(1)))
    assert documented == set(TRAFFIC_COLUMNS)
    for column in TRAFFIC_FILTER_COLUMNS:
        assert f"`{column}`" in section.split("`--where` filters on", 1)[1].split(".", 1)[0], column


def test_the_charging_rule_is_documented_with_the_codes_constants(sections: dict[str, str]) -> None:
    charges = sections["Charges"]
    assert "`money/charges.py`" in charges
    for name in ("call_bound", "call_charge", "TEMPLATE_TOKENS", "DEFAULT_COMPLETION_BOUND"):
        assert f"`{name}`" in charges, name
    assert f"{TEMPLATE_TOKENS:,} tokens (`TEMPLATE_TOKENS`)" in charges
    assert f"{DEFAULT_COMPLETION_BOUND:,} (`DEFAULT_COMPLETION_BOUND`)" in charges
    for field in (*COMPLETION_CAP_FIELDS, *CHOICE_FIELDS, *TEMPLATE_FIELDS):
        assert f"`{field}`" in charges, field
    assert "2^63-1" in charges and MAX_NANO == 2**63 - 1


def test_every_anthropic_error_type_of_messages_is_documented(sections: dict[str, str]) -> None:
    section = sections["HTTP surface"]
    for status, kind in ERROR_TYPES.items():
        assert re.search(rf"^\| {status} \| `{kind}`", section, flags=re.M), (status, kind)


def test_every_column_cascade_collect_writes_for_a_tool_question_is_documented(
    sections: dict[str, str],
) -> None:
    from collection.collector import CollectOptions, build_row, request_body
    from collection.prompts import Prompt
    from collection.targets import Target

    prompt = Prompt(
        query_id="q",
        prompt="factorial of 5",
        answer='[{"f": {"n": [5]}}]',
        grader="tool_call",
        dataset="bfcl",
        subject="simple_python",
        tools=({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},),
    )
    target = Target(
        name="m", base_url="http://m.test/v1", model="m", price=Price(input_per_mtok=1.0, output_per_mtok=1.0)
    )
    body = {"choices": [{"message": {"content": '{"name": "f", "arguments": {"n": 5}}'}}], "usage": {}}
    row = build_row(prompt, target, body, 1.0, True, request_body(prompt, target, CollectOptions()))
    runs = sections["Runs table"]
    documented = set(table_rows(runs)) | set(re.findall(r"`(\w+)`", runs))
    assert {"kind", "valid", "problem", "tool_calls"} <= set(row)
    assert set(row) - {"cost_usd", "prompt_tokens", "completion_tokens", "correct"} <= documented | {
        "subject",
        "answer",
    }
    assert "-inf" in table_rows(runs)["valid"]

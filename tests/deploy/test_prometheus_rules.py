"""The Prometheus config and alert rules are valid, unit-tested, and the dashboard's PromQL parses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_support import (
    DEPLOY,
    RULE_TESTS,
    RULES,
    as_plain_promql,
    dashboard_expressions,
    require_tool,
    rule_expressions,
)


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def _failing_unit_tests(tmp_path: Path, rules: str) -> str:
    """Run the rule unit tests against ``rules`` (a changed copy of the alert rules, in a layout
    like deploy/prometheus/ under ``tmp_path``): they must fail; promtool's output."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(rules)
    (tmp_path / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path / "tests")
    assert result.returncode != 0
    return result.stdout + result.stderr


def test_alert_rules_pass_promtool_check() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_their_promtool_unit_tests() -> None:
    # The unit tests include the escalation-drift alert firing (60% observed vs 30% expected) and
    # not firing (within tolerance, too few requests, two replicas pooled, before its `for`).
    result = _promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_cover_every_alert() -> None:
    alerts = {name for name, _ in rule_expressions() if not name.startswith("cascade:")}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    assert alerts - tested == set()


def test_drift_unit_test_fails_when_the_alert_threshold_is_loosened(tmp_path: Path) -> None:
    # The drift tests can fail: with a 40-point tolerance the 30-point drift no longer fires.
    loosened = RULES.read_text().replace(") > 0.10", ") > 0.40")
    assert loosened != RULES.read_text()
    assert "CascadeEscalationRateDrift" in _failing_unit_tests(tmp_path, loosened)


@pytest.mark.parametrize(
    ("original", "changed"),
    [
        ("cascade_score_drift_psi > 0.25", "cascade_score_drift_psi > 0.75"),  # 0.6 no longer fires
        ("cascade_score_drift_samples >= 100", "cascade_score_drift_samples >= 0"),  # 50 scores fire
    ],
)
def test_score_drift_unit_test_fails_when_the_alert_is_changed(
    tmp_path: Path, original: str, changed: str
) -> None:
    rules = RULES.read_text()
    assert original in rules
    assert "CascadeScoreDrift" in _failing_unit_tests(tmp_path, rules.replace(original, changed))


@pytest.mark.parametrize(
    ("original", "changed", "alert"),
    [
        # 25% of replica a's samples dropped for spend_cap no longer fires at a 40% line.
        (
            "cascade:learning_drop_ratio:rate15m > 0.10",
            "cascade:learning_drop_ratio:rate15m > 0.40",
            "CascadeLearningSamplesDropped",
        ),
        # Replica b's 7.5 drops in 15 minutes fire without the volume floor.
        ("[15m])) >= 10", "[15m])) >= 5", "CascadeLearningSamplesDropped"),
        # Counting drops at shutdown, the drop ratio shows replica a's 50% shutdown drops.
        (
            'rate(cascade_learning_dropped_total{reason!="shutdown"}[15m])',
            "rate(cascade_learning_dropped_total[15m])",
            "cascade:learning_drop_ratio:rate15m",
        ),
        # A store down for 2 minutes fires too early (replica a at 12 minutes).
        (
            "cascade_learning_store_up == 0\n        for: 10m",
            "cascade_learning_store_up == 0\n        for: 2m",
            "CascadeLearningStoreDown",
        ),
        # 95% of the cap no longer fires at a 96% line.
        (
            "cascade_shadow_spend_cap_usd > 0.9",
            "cascade_shadow_spend_cap_usd > 0.96",
            "CascadeShadowSpendNearCap",
        ),
    ],
)
def test_learning_unit_tests_fail_when_an_alert_is_changed(
    tmp_path: Path, original: str, changed: str, alert: str
) -> None:
    rules = RULES.read_text()
    assert rules.count(original) == 1, original
    assert alert in _failing_unit_tests(tmp_path, rules.replace(original, changed))


def test_shift_alarm_unit_test_fails_when_the_alert_waits_longer(tmp_path: Path) -> None:
    # Alarmed from minute 5: with a 10-minute wait it no longer fires at minute 12.
    rules = RULES.read_text()
    original = "max by (job, tier) (cascade_shift_alarm) >= 1\n        for: 2m"
    assert rules.count(original) == 1
    changed = rules.replace(original, original.replace("2m", "10m"))
    assert "CascadeShiftAlarm" in _failing_unit_tests(tmp_path, changed)


def test_compose_prometheus_config_is_valid_and_loads_the_rules() -> None:
    result = _promtool("check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cascade.rules.yml" in result.stdout + result.stderr


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses every expression when it checks a rule file: wrap each query in a rule.
    rules = [
        {"record": f"dashboard:query_{i}", "expr": as_plain_promql(expr)}
        for i, (_, expr) in enumerate(dashboard_expressions())
    ]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


def test_every_alert_links_to_its_runbook_section_in_the_operations_guide() -> None:
    import re

    guide = (DEPLOY.parent / "docs" / "operations.md").read_text()
    anchors = {heading.strip().lower() for heading in re.findall(r"^#### (\w+)$", guide, flags=re.M)}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                page, anchor = rule["annotations"]["runbook"].split("#")
                assert page == "docs/operations.md"
                assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]


@pytest.mark.parametrize(
    ("original", "changed"),
    [
        # 75% of small's escalations without a score no longer fires at an 80% line.
        (
            "cascade:escalation_missing_score_ratio:rate15m > 0.5",
            "cascade:escalation_missing_score_ratio:rate15m > 0.8",
        ),
        # Tier quiet's 15 escalations in 15 minutes fire without the volume floor.
        ("cascade:escalations:increase15m >= 20", "cascade:escalations:increase15m >= 10"),
    ],
)
def test_missing_scores_unit_test_fails_when_the_alert_is_changed(
    tmp_path: Path, original: str, changed: str
) -> None:
    rules = RULES.read_text()
    assert rules.count(original) == 1, original
    assert "CascadeMissingScoresDominate" in _failing_unit_tests(tmp_path, rules.replace(original, changed))

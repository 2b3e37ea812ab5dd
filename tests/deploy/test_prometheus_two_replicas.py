"""A real Prometheus scrapes two `cascade serve` replicas sharing one Redis (the ops drill).

Both targets must be up, counters must move on both, and a `cascade policy push` must switch both
replicas (cascade_policy_info) without a restart. Runs in about 15 seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys

from deploy_support import DEPLOY, require_tool, rule_expressions


def test_prometheus_sees_both_replicas_count_and_switch_policy_on_push() -> None:
    require_tool("prometheus")
    result = subprocess.run(
        [sys.executable, str(DEPLOY / "tools" / "prometheus_drill.py"), "--requests", "80", "--json"],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(report["targets_up"]) == 2
    counts = report["requests_per_instance"]
    assert set(counts["after_second_half"]) == set(report["targets_up"])
    assert sum(counts["after_second_half"].values()) >= 80
    assert report["policy_after"] != report["policy_before"]
    assert set(report["policy_info_before"].values()) == {report["policy_before"]}
    assert set(report["policy_info_after"].values()) == {report["policy_after"]}
    assert set(report["policy_info_after"]) == set(report["targets_up"])
    # The recording rules evaluated on the scraped data, and every outcome of the mix occurred.
    assert {"accepted", "escalated", "direct"} <= set(report["outcomes"])
    assert set(report["escalation_rate_expected"]) == {"economy", "balanced", "quality"}
    assert report["escalation_rate_observed"]["quality"] == 0
    alerts = [name for name, _ in rule_expressions() if not name.startswith("cascade:")]
    assert report["alert_rules_loaded"] == len(alerts) == 16
    # The score drift gauges of the policy's cascading tiers reached Prometheus (80 requests are
    # too few for a PSI in a 100-score window, so only the sample counts are checked).
    assert set(report["score_drift_samples"]) == {"economy", "balanced"}
    assert sum(report["score_drift_samples"].values()) > 0

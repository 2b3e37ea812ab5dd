"""/v1/models, /healthz, /readyz, /metrics (parsed with prometheus_client.parser), logs."""

from __future__ import annotations

import json
import time

from tests.support.gateway_testkit import model_configs, until
from tests.support.scripted_upstream import error, ok

MESSAGES = [{"role": "user", "content": "secret prompt text"}]


def test_models_lists_aliases_tiers_and_configured_models(gateway) -> None:
    ids = [m.id for m in gateway.client().models.list()]
    assert ids[0] == "cascade"
    assert {"cascade/balanced", "cascade/chain", "cascade/direct", "cascade/mix"} <= set(ids)
    assert {"small", "medium", "large"} <= set(ids)


def test_health_and_readiness(gateway) -> None:
    assert gateway.http.get("/healthz").json() == {"status": "ok"}
    ready = gateway.http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"ready": True}  # anonymous callers see the status only
    body = gateway.readiness().json()  # the admin key shows the details
    assert body["ready"] is True and body["policy"] is True and body["policy_watching"] is True
    all_up = {"small": True, "medium": True, "large": True}
    assert until(lambda: gateway.readiness().json()["upstreams"] == all_up)


def test_readiness_details_need_the_admin_key_and_never_show_paths_to_others(
    start_gateway, make_settings, tmp_path
) -> None:
    gateway = start_gateway(make_settings(policy=tmp_path / "missing-policy.json"))
    anonymous = gateway.http.get("/readyz")
    wrong_key = gateway.http.get("/readyz", headers={"authorization": "Bearer sk-not-admin"})
    for response in (anonymous, wrong_key):
        assert response.status_code == 503
        assert response.json() == {"ready": False}
        assert "missing-policy" not in response.text
    detailed = gateway.readiness()
    assert detailed.status_code == 503
    assert "missing-policy.json" in detailed.json()["policy_last_error"]


def test_an_unreachable_upstream_is_a_metric_not_unreadiness(start_gateway, make_settings, upstream) -> None:
    models = model_configs(upstream.base_url)
    models["large"]["base_url"] = "http://127.0.0.1:9/v1"
    gateway = start_gateway(make_settings(models=models))
    assert gateway.http.get("/readyz").status_code == 200  # the replica can still serve
    assert until(lambda: gateway.readiness().json()["upstreams"]["large"] is False)
    assert gateway.readiness().json()["upstreams"]["small"] is True
    assert gateway.sample("cascade_upstream_up", model="large") == 0
    assert gateway.sample("cascade_upstream_up", model="small") == 1
    # The background probe runs on its own interval, never per /readyz call.
    checked_at = gateway.gateway.health.checked_at
    for _ in range(5):
        gateway.http.get("/readyz")
        gateway.readiness()
    assert gateway.gateway.health.checked_at == checked_at


def test_metrics_follow_the_contract(gateway, upstream) -> None:
    upstream.script("up-small", ok(confidence=0.99), ok(confidence=0.3))
    client = gateway.client()
    client.chat.completions.create(model="cascade", messages=MESSAGES)  # accepted
    client.chat.completions.create(model="cascade", messages=MESSAGES)  # escalated
    client.chat.completions.create(model="cascade/direct", messages=MESSAGES)  # direct
    client.chat.completions.create(model="medium", messages=MESSAGES)  # passthrough
    gateway.http.post("/v1/chat/completions", content=b"{", timeout=5)  # rejected before routing
    families = gateway.metrics()
    expected = {
        "cascade_requests": {"tier", "outcome", "endpoint"},
        "cascade_escalations": {"tier", "from_model", "to_model"},
        "cascade_request_duration_seconds": {"tier", "endpoint"},
        "cascade_overhead_seconds": {"endpoint"},
        "cascade_confidence_score": {"tier", "model"},
        "cascade_upstream_requests": {"model", "status"},
        "cascade_upstream_duration_seconds": {"model"},
        "cascade_cost_usd": {"tier", "model"},
        "cascade_tokens": {"model", "kind"},
        "cascade_policy_info": {"policy_id"},
        "cascade_expected_escalation_rate": {"tier"},
        "cascade_policy_reload_failures": set(),
        "cascade_budget_rejections": set(),
        "cascade_auth_failures": {"reason"},
    }
    for name, labels in expected.items():
        assert name in families, name
        for sample in families[name].samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample.labels)
    assert families["cascade_requests"].type == "counter"
    assert families["cascade_request_duration_seconds"].type == "histogram"
    sample = gateway.sample
    assert sample("cascade_requests_total", tier="balanced", outcome="accepted") == 1
    assert sample("cascade_requests_total", tier="balanced", outcome="escalated") == 1
    assert sample("cascade_requests_total", tier="direct", outcome="direct") == 1
    assert sample("cascade_requests_total", tier="passthrough", outcome="passthrough") == 1
    assert sample("cascade_requests_total", tier="none", outcome="error") == 1
    assert sample("cascade_escalations_total", tier="balanced", from_model="small", to_model="large") == 1
    assert sample("cascade_confidence_score_count", tier="balanced", model="small") == 2
    assert sample("cascade_tokens_total", model="small", kind="prompt") == 20
    assert sample("cascade_tokens_total", model="small", kind="completion") == 10
    assert sample("cascade_cost_usd_total", tier="balanced", model="large") == 0.001
    assert sample("cascade_cost_usd_total", tier="passthrough", model="medium") == 0.0001
    assert sample("cascade_policy_info", policy_id=gateway.gateway.policy.policy_id) == 1
    assert sample("cascade_expected_escalation_rate", tier="balanced") == 0.4
    assert sample("cascade_overhead_seconds_count", endpoint="chat") == 5
    assert {s.labels["endpoint"] for s in families["cascade_requests"].samples} == {"chat"}
    assert sample("cascade_upstream_requests_total", model="small", status="2xx") == 2
    reasons = {s.labels["reason"] for s in families["cascade_auth_failures"].samples}
    assert reasons == {"missing", "unknown", "throttled"}
    # Bounded label values only: tiers of the policy + budget/passthrough/none, configured models.
    tiers = {s.labels["tier"] for s in families["cascade_requests"].samples}
    assert tiers <= {"balanced", "chain", "direct", "mix", "budget", "passthrough", "none"}
    assert "cascade_redis_up" not in families  # no Redis configured


def test_logs_are_json_lines_without_prompt_or_keys(
    start_gateway, make_settings, upstream, capfd, monkeypatch
) -> None:
    monkeypatch.setenv("SMALL_UPSTREAM_KEY", "sk-upstream-secret")
    models = model_configs(upstream.base_url)
    models["small"]["api_key_env"] = "SMALL_UPSTREAM_KEY"
    gateway = start_gateway(make_settings(models=models, logging={"level": "info"}))
    upstream.script("up-small", error(500), ok(confidence=0.99))
    raw = gateway.client().chat.completions.with_raw_response.create(model="cascade", messages=MESSAGES)
    assert upstream.calls("up-small")[0].authorization == "Bearer sk-upstream-secret"
    err = _stderr_until(capfd, '"event":"request"')
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    requests = [line for line in lines if line.get("event") == "request"]
    assert requests, err
    entry = requests[-1]
    assert entry["request_id"] == raw.headers["x-request-id"]
    assert entry["tier"] == "balanced" and entry["outcome"] == "accepted"
    assert entry["models_called"] == ["small"] and entry["score"] > 0.5
    assert entry["route"] == ["small", "large"] and entry["path"] == "/v1/chat/completions"
    assert entry["endpoint"] == "chat"
    assert {"cost_usd", "duration_ms", "overhead_ms", "upstream_ms"} <= set(entry)
    assert "secret prompt text" not in err
    assert "sk-upstream-secret" not in err
    assert "sk-upstream-secret" not in str(raw.headers)
    assert "sk-upstream-secret" not in gateway.http.get("/metrics").text


def test_prompts_logged_only_when_enabled(start_gateway, make_settings, upstream, capfd) -> None:
    gateway = start_gateway(make_settings(logging={"level": "info", "log_prompts": True}))
    gateway.client().chat.completions.create(model="cascade", messages=MESSAGES)
    assert "secret prompt text" in _stderr_until(capfd, '"event":"request"')


def _stderr_until(capfd, marker: str, timeout_s: float = 5.0) -> str:
    """Captured stderr, waiting for ``marker`` (the request line is written after the response)."""
    text = ""
    end = time.monotonic() + timeout_s
    while marker not in text and time.monotonic() < end:
        time.sleep(0.02)
        text += capfd.readouterr().err
    return text

"""Real `cascade serve` processes meet a malformed Redis URL, huge names and wrong keys.

Reproductions of issue 16 defects 11 (a malformed ``redis_url`` printed a 60-line traceback after
the "serving" line instead of one line and exit 2), 12 (an unknown tier or model name was echoed in
full into the error body) and 13 (wrong keys were neither logged with a reason and the client's
address nor counted).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from processes import write_gateway_config

from tests.support.gateway_process import GatewayProcess
from tests.support.scripted_upstream import ScriptedUpstream

API_KEY = "sk-reliability-a"
WRONG_KEY = "sk-wrong-but-secret-7f3a9c"


def _log_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("config", "env", "fragment"),
    [
        ({"redis_url": "redis://127.0.0.1:notaport/0"}, {}, "redis_url"),
        ({"redis_url": "http://127.0.0.1:6379/0"}, {}, "redis_url"),
        ({"redis_url": "redis://:pw-s3cret@127.0.0.1:6379/db0"}, {}, "redis_url"),
        ({}, {"CASCADE_REDIS_URL": "redis://127.0.0.1:99999/0"}, "redis_url"),
        ({"policy": "redis://127.0.0.1:six/0"}, {}, "policy"),
    ],
    ids=["port", "scheme", "database", "env-override", "policy-url"],
)
def test_a_malformed_redis_url_stops_serve_with_one_line_and_exit_2_before_serving(
    tmp_path: Path,
    upstream: ScriptedUpstream,
    policy_path: Path,
    config: dict[str, Any],
    env: dict[str, str],
    fragment: str,
) -> None:
    document: dict[str, Any] = {"policy": policy_path, **config}
    path = write_gateway_config(tmp_path, upstream_base_url=upstream.base_url, **document)
    gateway = GatewayProcess(path, env=env).start()
    try:
        status = gateway.wait(60)
    finally:
        gateway.kill()
    output = gateway.log_text()
    assert status == 2, output
    (line,) = _log_lines(output)
    assert line.startswith("error: ") and fragment in line, line
    assert "Traceback" not in output and "serving" not in output and "pw-s3cret" not in output


@pytest.fixture
def gateway(start_replicas: Any) -> GatewayProcess:
    (replica,) = start_replicas(1, env={"CASCADE_API_KEYS": API_KEY})
    return replica


def _post(gateway: GatewayProcess, body: dict[str, Any], **headers: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {API_KEY}", **headers}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)


MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


@pytest.mark.parametrize(
    ("model", "headers", "status"),
    [
        ("m" * 60_000, {}, 404),
        ("cascade/" + "t" * 60_000, {}, 400),
        ("cascade", {"x-cascade-tier": "t" * 4_000}, 400),
        ("cascade", {"x-cascade-max-cost-usd": "9" * 4_000 + "x"}, 400),
    ],
    ids=["model", "tier-in-model", "tier-header", "budget-header"],
)
def test_a_huge_unknown_name_is_quoted_cut_short_in_the_error(
    gateway: GatewayProcess, model: str, headers: dict[str, str], status: int
) -> None:
    response = _post(gateway, {"model": model, "messages": MESSAGES}, **headers)
    assert response.status_code == status
    message = response.json()["error"]["message"]
    assert len(response.content) < 1_000, len(response.content)
    assert "characters)" in message  # it says the name was cut, and how long it was
    assert "t" * 41 not in message and "m" * 41 not in message and "9" * 41 not in message


def test_refused_keys_are_logged_with_reason_and_address_and_counted_never_the_key(
    gateway: GatewayProcess,
) -> None:
    assert gateway.sample("cascade_auth_failures_total", reason="missing") == 0
    assert gateway.sample("cascade_auth_failures_total", reason="unknown") == 0
    body = {"model": "cascade", "messages": MESSAGES}
    url = gateway.url + "/v1/chat/completions"
    assert httpx.post(url, json=body, timeout=10).status_code == 401
    for _ in range(2):
        wrong = httpx.post(url, json=body, headers={"authorization": f"Bearer {WRONG_KEY}"}, timeout=10)
        assert wrong.status_code == 401
    models = httpx.get(gateway.url + "/v1/models", headers={"authorization": "Basic x"}, timeout=10)
    assert models.status_code == 401
    assert _post(gateway, body).status_code == 200  # the right key is not counted

    assert gateway.sample("cascade_auth_failures_total", reason="missing") == 2
    assert gateway.sample("cascade_auth_failures_total", reason="unknown") == 2
    entries = [json.loads(line) for line in _log_lines(gateway.log_text()) if line.startswith("{")]
    refused = [entry for entry in entries if entry["event"] == "auth_failed"]
    assert [entry["reason"] for entry in refused] == ["missing", "unknown", "unknown", "missing"]
    assert all(entry["level"] == "warning" and entry["client"].startswith("127.0.0.1:") for entry in refused)
    assert WRONG_KEY not in gateway.log_text() and WRONG_KEY not in gateway.get("/metrics").text

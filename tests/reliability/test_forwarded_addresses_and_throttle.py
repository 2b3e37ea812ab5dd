"""Whom a real `cascade serve` counts a wrong key against, and whom the throttle stops.

uvicorn, by default, believes ``X-Forwarded-For`` from 127.0.0.1 and rewrites the peer before the
app sees it: a client on loopback could then rotate the header to never be throttled, or claim
another client's address to lock it out. Served on loopback here, with ``auth.failure_limit: 5``:

* no proxy trusted: the header is ignored, wrong keys count against the real peer, and a stored
  key sent from that held-off address (with any claimed address) is still checked and served;
* ``trusted_proxies: [127.0.0.1]``: the right-most untrusted forwarded address is the client.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from processes import RedisServer

from gateway.commands.keys import add_key
from gateway.redis.keys import RedisKeys
from tests.support.gateway_process import GatewayProcess

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
AUTH = {"failure_limit": 5, "admin_key_env": None}


def _ask(gateway: GatewayProcess, key: str, forwarded_for: str) -> Any:
    client = gateway.client(key, default_headers={"x-forwarded-for": forwarded_for})
    return client.chat.completions.create(model="cascade", messages=MESSAGES)


def _refused_clients(gateway: GatewayProcess) -> list[str]:
    lines = [json.loads(line) for line in gateway.log_text().splitlines() if line.startswith("{")]
    return [line["client"] for line in lines if line.get("event") == "auth_failed"]


def test_from_loopback_forwarded_addresses_are_ignored_and_a_stored_key_is_never_locked_out(
    start_replicas: Any, redis_server: RedisServer
) -> None:
    with redis_server.client() as client:
        key, _ = add_key(client, "behind-loopback", None, RedisKeys())
    (gateway,) = start_replicas(1, redis=redis_server, auth=AUTH)
    for i in range(5):  # each claims another address: all are the peer's
        with pytest.raises(openai.AuthenticationError):
            _ask(gateway, f"sk-wrong-{i}", f"10.9.{i}.1")
    with pytest.raises(openai.RateLimitError) as held:
        _ask(gateway, "sk-wrong-5", "10.9.5.1")
    assert held.value.body["code"] == "too_many_auth_failures"  # type: ignore[index]
    assert 1 <= int(held.value.response.headers["retry-after"]) <= 60
    # The stored key, never seen by this replica, from the held-off peer and claiming the address
    # the wrong keys claimed: checked and served.
    assert _ask(gateway, key, "10.9.0.1").choices[0].message.content
    clients = _refused_clients(gateway)
    assert len(clients) == 6 and all(c.startswith("127.0.0.1:") for c in clients), clients


def test_behind_a_trusted_proxy_the_right_most_untrusted_forwarded_address_is_the_client(
    start_replicas: Any,
) -> None:
    (gateway,) = start_replicas(
        1, env={"CASCADE_API_KEYS": "sk-proxied"}, auth=AUTH, trusted_proxies=["127.0.0.1"]
    )
    for i in range(5):  # a spoofed entry left of what the proxy appended is never believed
        with pytest.raises(openai.AuthenticationError):
            _ask(gateway, f"sk-wrong-{i}", f"203.0.113.{i}, 198.51.100.7")
    with pytest.raises(openai.RateLimitError):
        _ask(gateway, "sk-wrong-5", "198.51.100.7")
    with pytest.raises(openai.AuthenticationError):  # another client behind the proxy: not held off
        _ask(gateway, "sk-wrong-6", "198.51.100.8")
    assert _ask(gateway, "sk-proxied", "198.51.100.7").choices[0].message.content
    assert _refused_clients(gateway) == ["198.51.100.7"] * 6 + ["198.51.100.8"]

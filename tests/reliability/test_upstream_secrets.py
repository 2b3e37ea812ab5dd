"""A lying upstream that echoes the gateway's secrets in its error text, against a real `cascade serve`.

The scripted upstream answers 400/422 with a message quoting the ``Authorization`` header it
received (the upstream key), the client key and the admin key, and with secrets as its error
``code`` and ``param`` (relayed codes are the provider's own: they pass the same redaction).
Whatever the client asked for (a configured model, a stream, a cascade), the relayed error says why
without any of them, and the gateway's log holds none of them either.
"""

from __future__ import annotations

import httpx
import pytest
from processes import UPSTREAM_IDS, model_configs

from tests.support.scripted_upstream import Reply

# Random-looking, so that a piece of one found in a text can only come from the secret.
UPSTREAM_KEY = "sk-Q7vX2mLp9RtZ4wKc8NbYj3Hd"
CLIENT_KEY = "sk-c5Ft8GzW1qVr6TyU0pLa"
ADMIN_KEY = "adm-9KsD4fJh2LxC7vBn3MqP"
ENV = {"UPSTREAM_KEY": UPSTREAM_KEY, "CASCADE_API_KEYS": CLIENT_KEY, "CASCADE_ADMIN_KEY": ADMIN_KEY}
SECRETS = (UPSTREAM_KEY, CLIENT_KEY, ADMIN_KEY)


def _models_with_key(base_url: str) -> dict[str, dict[str, object]]:
    models = model_configs(base_url)
    for config in models.values():
        config["api_key_env"] = "UPSTREAM_KEY"
    return models


def _lying_rejection(status: int, padding: int = 0) -> Reply:
    message = (
        "x" * padding + f"bad key Bearer {UPSTREAM_KEY}; the caller used {CLIENT_KEY}, the admin {ADMIN_KEY}"
    )
    error = {"message": message, "type": "invalid_request_error", "code": UPSTREAM_KEY, "param": ADMIN_KEY}
    return Reply(status=status, body={"error": error})


def _leaks(text: str) -> list[str]:
    """Every secret, or piece of one (8 characters or more), found in ``text``."""
    found = []
    for secret in SECRETS:
        pieces = {secret[i : i + 8] for i in range(len(secret) - 7)}
        found.extend(piece for piece in pieces if piece in text)
    return found


@pytest.mark.parametrize(
    ("model", "stream", "failing"),
    [
        pytest.param("small", False, ["small"], id="a configured model"),
        pytest.param("small", True, ["small"], id="a configured model, streamed"),
        pytest.param("cascade", False, ["small", "large"], id="a cascade whose stages both refuse"),
        pytest.param("cascade", True, ["small", "large"], id="a streamed cascade whose stages both refuse"),
    ],
)
@pytest.mark.parametrize("status", [400, 422])
def test_upstream_error_text_is_relayed_without_any_configured_secret(
    start_replicas, upstream, model: str, stream: bool, failing: list[str], status: int
) -> None:
    (gateway,) = start_replicas(1, env=ENV, models=_models_with_key(upstream.base_url))
    for name in failing:
        upstream.script(UPSTREAM_IDS[name], _lying_rejection(status))
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        timeout=30,
    )

    # The upstream really got the key it then quoted back.
    assert {call.authorization for call in upstream.calls()} == {f"Bearer {UPSTREAM_KEY}"}
    assert response.status_code == status  # the upstream's own status
    error = response.json()["error"]
    assert f"upstream model '{failing[-1]}' rejected the request: bad key Bearer ***" in error["message"]
    assert error["type"] == "invalid_request_error" and error["code"] is None and error["param"] is None
    assert _leaks(response.text) == [] and _leaks(str(response.headers)) == []
    assert _leaks(gateway.log_text()) == []


def test_a_secret_cut_by_the_message_length_limit_leaves_no_piece_behind(start_replicas, upstream) -> None:
    (gateway,) = start_replicas(1, env=ENV, models=_models_with_key(upstream.base_url))
    # The key starts 10 characters before the relayed message's 300-character cut.
    upstream.script(UPSTREAM_IDS["small"], _lying_rejection(400, padding=290 - len("bad key Bearer ")))
    response = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
        json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert response.status_code == 400
    assert "bad key Bearer ***" in response.json()["error"]["message"]
    assert _leaks(response.text) == []

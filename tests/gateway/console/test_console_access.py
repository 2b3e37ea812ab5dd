"""Who may read the console (gateway.console.access): the admin key in a header or the login's session
cookie; without an admin key, a loopback connection only, any other refused with a page saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.config.settings import Settings
from gateway.console.access import COOKIE, SESSION_S, ConsoleAccess, local_connection
from gateway.keys.auth import Authenticator
from tests.support.gateway_testkit import ADMIN_KEY
from tests.support.in_process_gateway import InProcessGateway


def scope(server: str, client: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    return {"server": (server, 8000), "client": (client, 50000), "headers": headers or []}


def test_without_an_admin_key_only_a_local_unforwarded_connection_is_let_in() -> None:
    access = ConsoleAccess(Authenticator(), "CASCADE_ADMIN_KEY")
    assert access.verdict(scope("127.0.0.1", "127.0.0.1"), None, None) == "open_loopback"
    assert access.verdict(scope("::1", "::1"), None, None) == "open_loopback"
    assert access.verdict(scope("0.0.0.0", "10.1.2.3"), None, None) == "refused"
    assert access.verdict(scope("10.0.0.5", "127.0.0.1"), None, None) == "refused"  # a public bind
    proxied = scope("127.0.0.1", "127.0.0.1", [(b"x-forwarded-for", b"203.0.113.9")])
    assert access.verdict(proxied, None, None) == "refused" and not local_connection(proxied)
    assert "$CASCADE_ADMIN_KEY is unset" in access.refusal()


def test_with_an_admin_key_the_key_or_a_session_is_needed() -> None:
    access = ConsoleAccess(Authenticator(admin_key=ADMIN_KEY), "CASCADE_ADMIN_KEY")
    local = scope("127.0.0.1", "127.0.0.1")
    assert access.verdict(local, None, None) == "login"  # a key exists: loopback is not enough
    assert access.verdict(local, f"Bearer {ADMIN_KEY}", None) == "admin"
    assert access.verdict(local, "Bearer wrong", None) == "login"
    session = access.new_session(now=1_000_000)
    assert ADMIN_KEY not in session
    assert access.session_valid(session, now=1_000_000 + SESSION_S)
    assert not access.session_valid(session, now=1_000_000 + SESSION_S + 1)  # expired
    issued, _, signature = session.partition(".")
    assert not access.session_valid(f"{int(issued) + 3600}.{signature}", now=1_000_000)  # forged time
    other = ConsoleAccess(Authenticator(admin_key="another-key"), "CASCADE_ADMIN_KEY")
    assert not other.session_valid(session, now=1_000_000)  # void once the key changes


def test_a_page_without_the_key_redirects_to_the_login(console_gateway: InProcessGateway) -> None:
    answer = console_gateway.http.get("/console/requests?tier=balanced", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login?next=/console/requests%3Ftier%3Dbalanced"
    part = console_gateway.http.get("/console/requests", headers={"hx-request": "true"})
    assert part.status_code == 401 and part.headers["hx-redirect"].startswith("/console/login")


def test_the_login_sets_an_httponly_session_cookie_and_refuses_a_wrong_key(
    console_gateway: InProcessGateway,
) -> None:
    http = console_gateway.http
    wrong = http.post("/console/login", data={"key": "nope", "next": "/console/requests"})
    assert wrong.status_code == 401 and "That is not the admin key." in wrong.text
    signed = http.post(
        "/console/login",
        data={"key": ADMIN_KEY, "next": "https://elsewhere.example/"},
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/console/requests"  # never off-site
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=") and ADMIN_KEY not in cookie
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/console", f"Max-Age={SESSION_S}"):
        assert attribute.lower() in cookie.lower()
    session = cookie.split(";")[0].split("=", 1)[1]
    page = http.get("/console/requests", headers={"cookie": f"{COOKIE}={session}"})
    assert page.status_code == 200 and "Sign out" in page.text
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_without_an_admin_key_a_remote_connection_gets_a_page_saying_why(
    start_gateway: Callable[..., InProcessGateway],
    console_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CASCADE_ADMIN_KEY")
    gateway = start_gateway(console_settings())  # the in-process server is not a loopback address
    for path in ("/console/requests", "/console/login"):
        answer = gateway.http.get(path, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert answer.status_code == 403
        assert "no admin key is configured ($CASCADE_ADMIN_KEY is unset)" in answer.text

"""Who may read the console: the holder of the gateway's admin key (``auth.admin_key_env``).

A request is let in when it carries the admin key as ``Authorization: Bearer <key>`` (scripts, curl)
or the session cookie the login form sets (browsers). The cookie never holds the key: it is
``<issued unix seconds>.<HMAC of them under a token derived from the key>`` (``Authenticator.admin_token``),
HttpOnly, ``SameSite=Strict``, ``Path=/console``, ``Secure`` on https, valid for ``SESSION_S`` and
void as soon as the admin key changes.

Without an admin key the console is open only to a connection made to a loopback address from a
loopback address with no ``Forwarded``/``X-Forwarded-For`` header (a person on the gateway's own
host); any other is refused with a page saying why (``REFUSED_NO_KEY``): a gateway bound to a
public address, or behind a proxy, never shows its traffic to whoever reaches it.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.keys.auth import Authenticator

COOKIE = "cascade_console"
SESSION_S = 12 * 3600
_PURPOSE = "cascade-console-session"

REFUSED_NO_KEY = (
    "The console is refused: no admin key is configured (${env} is unset) and this connection is not "
    "a loopback one. Without an admin key the console is served only on 127.0.0.1/::1 to a local "
    "client. Set ${env} and restart the gateway to use the console from elsewhere."
)

Verdict = Literal["admin", "open_loopback", "login", "refused"]


@dataclass(frozen=True, slots=True)
class ConsoleAccess:
    """Decides each console request (see the module docstring)."""

    authenticator: Authenticator
    admin_key_env: str

    def verdict(self, scope: Mapping[str, Any], authorization: str | None, cookie: str | None) -> Verdict:
        """``admin`` (the key or a valid session), ``open_loopback`` (no key configured, a local
        connection), ``login`` (a key is configured and none was shown) or ``refused``."""
        if not self.authenticator.has_admin_key:
            return "open_loopback" if local_connection(scope) else "refused"
        if authorization is not None and self.authenticator.is_admin(authorization):
            return "admin"
        if cookie is not None and self.session_valid(cookie):
            return "admin"
        return "login"

    def refusal(self) -> str:
        """Why a console without an admin key refuses this connection."""
        return REFUSED_NO_KEY.replace("${env}", "$" + self.admin_key_env)

    def key_is_admin(self, key: str) -> bool:
        """Whether ``key`` (typed in the login form) is the admin key."""
        return self.authenticator.is_admin(f"Bearer {key}")

    def new_session(self, now: float | None = None) -> str:
        """A session cookie value issued now."""
        issued = str(int(now if now is not None else time.time()))
        return f"{issued}.{self._sign(issued)}"

    def session_valid(self, value: str, now: float | None = None) -> bool:
        """Whether ``value`` is a session this admin key issued less than ``SESSION_S`` ago."""
        issued, _, signature = value.partition(".")
        if not issued.isdigit() or not signature:
            return False
        age = (now if now is not None else time.time()) - int(issued)
        if not 0 <= age <= SESSION_S:
            return False
        expected = self._sign(issued)
        return expected is not None and hmac.compare_digest(signature, expected)

    def _sign(self, issued: str) -> str | None:
        secret = self.authenticator.admin_token(_PURPOSE)
        if secret is None:
            return None
        return hmac.new(secret.encode(), issued.encode(), "sha256").hexdigest()


def local_connection(scope: Mapping[str, Any]) -> bool:
    """Whether the connection was made to and from a loopback address and was not forwarded."""
    server, client = scope.get("server"), scope.get("client")
    if not server or not client or not _loopback(server[0]) or not _loopback(client[0]):
        return False
    names = {name for name, _ in scope.get("headers", ())}
    return b"forwarded" not in names and b"x-forwarded-for" not in names


def _loopback(host: Any) -> bool:
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False

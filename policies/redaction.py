"""Secrets out of text: the one redaction of everything this project relays, logs or prints.

* ``redact_url(url)``: a URL (Redis, PostgreSQL, an upstream's base URL) without the password in its
  user info (``redis://user:***@host``; a user name alone is kept) nor the values of query
  parameters that name a secret (``?password=***``).
* ``url_secrets(url)``: those secret parts themselves, to give a ``Redactor``.
* ``Redactor(secrets)``: for text that came from elsewhere (an upstream's error message, a
  library's exception): every occurrence of a known secret value, every ``Bearer``/``Basic``
  credential and the credentials of every URL in it are replaced by ``***``. The gateway builds one
  from every secret its config refers to (``gateway.config.Settings.secret_values``).

It imports nothing of the project, so every package (gateway, traffic, calibration) uses this one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"

# scheme://userinfo@ : the user info of a URL, up to its last "@" (a password may hold an "@").
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/\s?#]*)@")
# A query parameter whose name says it holds a secret (password, api_key, access_token, sslkey...).
_SECRET_PARAMETER = re.compile(r"(?i)([?&;][^=&#\s]*(?:pass|secret|key|token|auth)[^=&#\s]*=)[^&#\s]*")
# An HTTP credential as it appears in an Authorization header echoed back.
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}")


def _mask_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{user}:{REDACTED}@" if colon else match.group(0)  # a bare user name is no secret


def redact_url(url: str) -> str:
    """``url`` without the password of its user info nor secret query values, for messages."""
    return _SECRET_PARAMETER.sub(rf"\1{REDACTED}", _URL_USERINFO.sub(_mask_userinfo, url))


def url_secrets(url: str | None) -> list[str]:
    """The secret parts of a URL (the password of its user info, secret query values), to redact."""
    if not url:
        return []
    found = []
    for match in _URL_USERINFO.finditer(url):
        _, colon, password = match.group(2).partition(":")
        if colon:
            found.append(password)
    found.extend(m.group(0).split("=", 1)[1] for m in _SECRET_PARAMETER.finditer(url))
    return [s for s in found if s]


class Redactor:
    """Replaces known secrets, HTTP credentials and URL credentials in text by ``***``."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str | None] = ()):
        """``secrets``: the values that must never be shown (empty and None entries are ignored)."""
        values = sorted({s for s in secrets if s}, key=len, reverse=True)  # a longer secret first
        self._secrets = re.compile("|".join(map(re.escape, values))) if values else None

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        if self._secrets is not None:
            text = self._secrets.sub(REDACTED, text)
        text = _CREDENTIAL.sub(rf"\1\2{REDACTED}", text)
        return redact_url(text)

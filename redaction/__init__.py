"""Secrets out of text: the one redaction of everything this project relays, logs or prints.

* ``redact_url(url)``: a URL (Redis, PostgreSQL, an upstream's base URL) without the password in its
  user info (``redis://user:***@host``; a user name alone is kept) nor the values of query
  parameters that name a secret (``?password=***``).
* ``url_secrets(url)``: those secret parts themselves, to give a ``Redactor``.
* ``Redactor(secrets)``: for text that came from elsewhere (an upstream's error message, a
  library's exception): every occurrence of a known secret value, every ``Bearer``/``Basic``
  credential and the credentials of every URL in it are replaced by ``***``. The gateway builds one
  from every secret its config refers to (``gateway.config.settings.Settings.secret_values``).

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


# Characters an upstream may put inside a secret it echoes: whitespace (a wrapped line) and
# invisible format characters (zero-width spaces, joiners, BOM).
_INVISIBLE = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad")
# JSON/C escapes of a line break or tab written out as text (``\n``): a break, not a character.
_ESCAPED_BREAKS = frozenset("nrtbfv")
_HEX = frozenset("0123456789abcdefABCDEF")


def _skeleton(text: str) -> tuple[str, list[int], list[int]]:
    """``text`` without what may split a secret (whitespace, invisible characters, escaped line
    breaks ``\\n``, backslashes of escapes) and with ``\\uXXXX`` escapes decoded; with, for each
    character kept, where it starts and ends in ``text``. One pass."""
    kept: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace() or char in _INVISIBLE:
            i += 1
            continue
        if char == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1  # a run of backslashes: an escape, maybe escaped again (JSON in JSON)
            if j < n and text[j] in _ESCAPED_BREAKS:
                i = j + 1
                continue
            if j + 4 < n and text[j] == "u" and all(h in _HEX for h in text[j + 1 : j + 5]):
                decoded = chr(int(text[j + 1 : j + 5], 16))
                if not (decoded.isspace() or decoded in _INVISIBLE):
                    kept.append(decoded)
                    starts.append(i)
                    ends.append(j + 5)
                i = j + 5
                continue
            i = j  # the escaped character itself is kept
            continue
        kept.append(char)
        starts.append(i)
        ends.append(i + 1)
        i += 1
    return "".join(kept), starts, ends


class Redactor:
    """Replaces known secrets, HTTP credentials and URL credentials in text by ``***``.

    A secret is found however the text splits or escapes it: across a line break or other
    whitespace, around invisible characters, or written with JSON escapes (``\\n``, ``\\u0041``).
    """

    __slots__ = ("_secrets",)

    def __init__(self, secrets: Iterable[str | None] = ()):
        """``secrets``: the values that must never be shown (empty and None entries are ignored)."""
        found = {_skeleton(s)[0] for s in secrets if s}
        values = sorted((s for s in found if s), key=len, reverse=True)  # a longer secret first
        self._secrets = re.compile("|".join(map(re.escape, values))) if values else None

    def __call__(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        if self._secrets is not None:
            text = self._mask_secrets(text)
        text = _CREDENTIAL.sub(rf"\1\2{REDACTED}", text)
        return redact_url(text)

    def _mask_secrets(self, text: str) -> str:
        assert self._secrets is not None
        skeleton, starts, ends = _skeleton(text)
        spans = [(starts[m.start()], ends[m.end() - 1]) for m in self._secrets.finditer(skeleton)]
        if not spans:
            return text
        out, position = [], 0
        for start, end in spans:  # in order and not overlapping (finditer's matches)
            out.append(text[position:start])
            out.append(REDACTED)
            position = end
        out.append(text[position:])
        return "".join(out)

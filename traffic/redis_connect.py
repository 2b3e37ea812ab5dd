"""The synchronous Redis client of the operator commands that read and push the served policy.

``cascade policy``, ``cascade keys`` (gateway) and ``cascade recalibrate`` (calibration) each open
one client with ``connect_sync``: same timeouts, same PING check, same one-line error with the URL's
password redacted. It lives here, below both ``gateway`` and ``calibration``, because the ``traffic``
extra is what brings redis to ``cascade recalibrate --push``; redis is imported only when called, so a
lean install that never connects does not need it.
"""

from __future__ import annotations

from typing import Any

from redaction import redact_url

# Seconds: an unreachable host fails the command promptly instead of hanging an operator's shell.
_CONNECT_TIMEOUT_S = 3
_COMMAND_TIMEOUT_S = 5


class RedisUnreachableError(Exception):
    """Redis cannot be reached at the given URL; a one-line message without the URL's password."""


def connect_sync(url: str) -> Any:
    """A synchronous redis-py client (``decode_responses``) that answered a PING.

    Raises RedisUnreachableError when the URL is malformed or Redis does not answer.
    """
    import redis

    try:
        client = redis.Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=_CONNECT_TIMEOUT_S,
            socket_timeout=_COMMAND_TIMEOUT_S,
        )
        client.ping()
    except (redis.RedisError, OSError, ValueError) as exc:
        raise RedisUnreachableError(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
    return client

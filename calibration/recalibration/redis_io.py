"""The served policy in Redis, for ``cascade recalibrate``: read it, and replace it only if unchanged.

The client is ``traffic.redis_connect.connect_sync`` and the push is ``publishing.push_policy``
(the mechanism and validation of ``cascade policy push``), made conditional on the policy read at the
start still being the one stored: a policy pushed by someone else while the recalibration ran is never
overwritten by a policy that was compared with another one.
"""

from __future__ import annotations

from typing import Any

from policies import PolicyError, parse_policy
from policies.schema import Policy
from publishing import PolicyChangedError, PolicyKeys, push_policy, read_current


class RedisPolicyError(Exception):
    """Redis cannot be used (unreachable, unreadable policy, changed meanwhile); one-line message."""


def read_served(client: Any, keys: PolicyKeys) -> tuple[str | None, Policy | None]:
    """The stored policy text and the parsed policy, (None, None) when none was pushed."""
    import redis

    try:
        raw = read_current(client, keys)
    except redis.RedisError as exc:
        raise RedisPolicyError(f"redis: {exc}") from None
    if raw is None:
        return None, None
    try:
        return raw, parse_policy(raw, source=keys.policy_current)
    except PolicyError as exc:
        raise RedisPolicyError(f"the served policy cannot be read: {exc}") from None


def push_if_unchanged(client: Any, policy: Policy, keys: PolicyKeys, replacing: str | None) -> int:
    """Push ``policy`` if the stored policy text is still ``replacing`` (None: still none); the version."""
    import redis

    try:
        return push_policy(client, policy, keys, replacing=replacing)
    except (PolicyChangedError, redis.WatchError) as exc:
        reason = str(exc) if isinstance(exc, PolicyChangedError) else "it changed during the push"
        raise RedisPolicyError(
            f"not pushed: the served policy changed during recalibration ({reason}); rerun"
        ) from None
    except redis.RedisError as exc:
        raise RedisPolicyError(f"redis: {exc}") from None


def keep_report(client: Any, document: dict[str, Any], keys: PolicyKeys) -> None:
    """Keep ``document`` (the JSON report) as the last recalibration's (``keys.recalibration_last``),
    for the gateway console; a Redis error here is ignored (the report file and the push are what count)."""
    import contextlib
    import json

    import redis

    with contextlib.suppress(redis.RedisError, ValueError):
        client.set(keys.recalibration_last, json.dumps(document, allow_nan=False))

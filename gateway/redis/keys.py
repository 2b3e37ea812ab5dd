"""Names of everything the gateway keeps in Redis, under one configurable prefix.

The keys are listed in docs/contracts.md#redis-keys.

The contract names use the default prefix ``cascade``. A different prefix (``CASCADE_REDIS_PREFIX``)
lets several deployments, or test runs, share one Redis without seeing each other's policy, keys or
spend; pub/sub channels are global across Redis databases, so a database index alone would not do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from publishing import DEFAULT_PREFIX, PREFIX_ENV, PolicyKeys


@dataclass(frozen=True, slots=True)
class RedisKeys(PolicyKeys):
    """Key and channel names under ``prefix`` (the policy's from ``publishing.PolicyKeys``)."""

    @classmethod
    def from_env(cls) -> RedisKeys:
        """Keys under ``$CASCADE_REDIS_PREFIX`` (default ``cascade``)."""
        return cls(os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX)

    @property
    def client_keys(self) -> str:
        """Hash: sha256(client key) -> JSON {"name": ..., "limit_usd": ...}."""
        return f"{self.prefix}:keys"

    def spend(self, key_id: str, window_start: int) -> str:
        """Spend counter (integer nano-USD, with a TTL) of one client key in one window."""
        return f"{self.prefix}:spend:{key_id}:{window_start}"

    def spend_pending(self, key_id: str, window_start: int) -> str:
        """Hash: reservation id -> reserved nano-USD, until settled (same TTL as the counter)."""
        return f"{self.spend(key_id, window_start)}:pending"

    def spend_cancelled(self, op_id: str) -> str:
        """Tombstone of a reservation cancelled before it landed (short TTL)."""
        return f"{self.prefix}:spend:cancelled:{op_id}"

    def spend_applied(self, op_id: str) -> str:
        """Marker of a write-back already applied (short TTL)."""
        return f"{self.prefix}:spend:applied:{op_id}"

    def rate(self, key_id: str, window_s: int, window_start: int) -> str:
        """Hash {"r": requests, "t": tokens} of one client key in one window of one rate limit
        (gateway.keys.rate_limits; expires with the window)."""
        return f"{self.prefix}:rate:{key_id}:{window_s}:{window_start}"

    def breaker(self, model: str) -> str:
        """Hash {"failures": consecutive failed calls, "open_until": unix seconds} of one configured
        model's circuit breaker, shared by the replicas (gateway.upstream.breaker_share)."""
        return f"{self.prefix}:breaker:{model}"

    def shift_alarms(self, policy_id: str) -> str:
        """Hash: alarmed tier -> unix seconds of its shift alarm, for one policy, shared by the
        replicas (gateway.config.shift_alarm_share; expires a week after its last write)."""
        return f"{self.prefix}:shift_alarm:{policy_id}"

    @property
    def replicas(self) -> str:
        """Sorted set: replica id -> when it last said it is live (Redis time, unix seconds);
        the replicas split a key's headroom between them during an outage (gateway.keys.outage)."""
        return f"{self.prefix}:replicas"

    @property
    def console_replicas(self) -> str:
        """Sorted set: replica id -> when it last wrote its console snapshot (unix seconds)."""
        return f"{self.prefix}:console:replicas"

    def console_snapshot(self, replica_id: str) -> str:
        """String: one replica's aggregate snapshot (JSON, gateway.assembly.replica_feed), with a TTL."""
        return f"{self.prefix}:console:replica:{replica_id}"

    def console_key_spend(self, minute_start: int) -> str:
        """Hash: key id -> spent + reserved nano-USD in its current window, sampled in that minute."""
        return f"{self.prefix}:console:keyspend:{minute_start}"

    def console_key_spend_taken(self, minute_start: int) -> str:
        """String: set by the one replica that samples the keys' spend in that minute (short TTL)."""
        return f"{self.prefix}:console:keyspend:{minute_start}:taken"

    @property
    def console_requests(self) -> str:
        """Stream of the console's request records, capped at ``console.max_records`` entries
        (gateway.records.stream_store)."""
        return f"{self.prefix}:console:requests"

    @property
    def console_index(self) -> str:
        """Sorted set: request id -> the millisecond of its record's stream entry (same cap)."""
        return f"{self.prefix}:console:index"

    @property
    def spend_epoch(self) -> str:
        """Random id of this Redis's spend data; missing or new means the data was lost."""
        return f"{self.prefix}:spend:epoch"


def is_redis_url(value: str) -> bool:
    """Whether ``value`` names a Redis (``redis://``, ``rediss://``, ``unix://``) rather than a file."""
    return value.startswith(("redis://", "rediss://", "unix://"))

"""Client and admin API keys, stored and compared only as SHA-256 hashes.

Client keys come from the environment variable named by ``auth.api_keys_env`` (comma-separated) and,
with Redis, from the hash ``{prefix}:keys`` (sha256(key) -> JSON ``{"name", "limit_usd"}``, and
optionally ``rate_limits`` and ``budget_period``, gateway.config.key_settings), which ``cascade keys add``
fills. With no key anywhere the gateway is open only if the config says so
(``auth.open: true``, logged once at start); otherwise an empty key store refuses every request
with 401 and says why in the log, so a Redis that lost its data never opens the gateway. Once any
key exists the gateway requires one; it does not reopen by itself if keys are later removed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.config.key_settings import (
    BudgetPeriod,
    RateLimit,
    merge_windows,
    parse_period,
    parse_rate_limits,
)
from gateway.keys.auth_throttle import AuthFailureThrottle
from gateway.keys.client_address import ClientAddress, ClientAddresses
from gateway.redis.batch import RedisBatcher
from gateway.redis.keys import RedisKeys
from gateway.wire.errors import AuthenticationError, AuthThrottledError, AuthUnavailableError

log = logging.getLogger("cascade.auth")

# Told of each refused client key: (reason "missing" | "unknown", the caller's address or None).
AuthFailed = Callable[[str, str | None], None]

# Length of the hex key_id shown in logs and used in spend counter names: identifies, never reveals.
KEY_ID_CHARS = 16


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who is calling: ``key_id`` is a short hash of the key (None on an open gateway); its USD
    limit, rate limits and budget period (gateway.config.key_settings; None: the fixed window), and when
    it was created (unix seconds, None if unknown)."""

    key_id: str | None
    limit_usd: float | None
    name: str | None = None
    rate_limits: tuple[RateLimit, ...] = ()
    period: BudgetPeriod | None = None
    created_at: float | None = None

    @property
    def metered(self) -> bool:
        """Whether the key's requests are reserved for (a USD limit or a rate limit)."""
        return self.key_id is not None and (self.limit_usd is not None or bool(self.rate_limits))


ANONYMOUS = ClientIdentity(key_id=None, limit_usd=None)


def hash_key(key: str) -> str:
    """Full SHA-256 hex digest of a key: what is stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key_hash: str) -> str:
    """The short id of a key from its hash: what logs, counters and spend keys show."""
    return key_hash[:KEY_ID_CHARS]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def parse_env_keys(value: str | None) -> list[str]:
    """Comma-separated keys of an environment variable (blank entries ignored)."""
    return [k.strip() for k in (value or "").split(",") if k.strip()]


class Authenticator:
    """Checks client keys (environment + Redis) and the admin key.

    ``redis``: a client (bounded by its own socket timeouts), or the request path's
    ``RedisBatcher``, whose lookups then share pipelines with the spend operations.
    """

    def __init__(
        self,
        *,
        env_keys: Iterable[str] = (),
        admin_key: str | None = None,
        default_limit_usd: float | None = None,
        redis: Redis | RedisBatcher | None = None,
        keys: RedisKeys | None = None,
        api_keys_env: str | None = None,
        admin_key_env: str | None = None,
        cache_ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        allow_open: bool = False,
        on_failure: AuthFailed | None = None,
        throttle: AuthFailureThrottle | None = None,
        default_rate_limits: tuple[RateLimit, ...] = (),
        default_period: BudgetPeriod | None = None,
        addresses: ClientAddresses | None = None,
    ):
        """``on_failure(reason, client)`` is told of every refused client key (see ``authenticate``);
        ``throttle`` holds off addresses that keep sending refused keys (None: never);
        ``default_*``: what a key without its own limits gets (the config's ``budgets``);
        ``addresses``: how a caller's address is read (default: the peer, no proxy trusted)."""
        default_rate_limits = merge_windows(default_rate_limits)
        self._default_rates = default_rate_limits
        self._default_period = default_period
        self._static = {
            hash_key(k): ClientIdentity(
                key_id_of(hash_key(k)), default_limit_usd, None, default_rate_limits, default_period
            )
            for k in env_keys
        }
        self._admin_hash = hash_key(admin_key) if admin_key else None
        self._default_limit = default_limit_usd
        self._redis = RedisBatcher.wrap(redis, None) if redis is not None else None
        self._keys = keys or RedisKeys()
        self._api_keys_env = api_keys_env
        self._admin_key_env = admin_key_env
        self._cache_ttl_s = cache_ttl_s
        self._clock = clock
        # key hash -> (identity or None for "unknown key", monotonic expiry)
        self._cache: dict[str, tuple[ClientIdentity | None, float]] = {}
        # Whether a key is required; sticky once True. None = not known yet (Redis never answered).
        self._closed: bool | None = True if self._static else (False if redis is None else None)
        self._closed_checked_at = float("-inf")
        self._allow_open = allow_open
        self._empty_logged_at = float("-inf")
        self._on_failure = on_failure
        self._throttle = throttle
        self._addresses = addresses or ClientAddresses()

    @property
    def is_open(self) -> bool:
        """True while the config allows an open gateway and no client key exists anywhere."""
        return self._allow_open and self._closed is False

    async def start(self) -> None:
        """Find out whether keys exist and log once if the gateway is open."""
        await self._refresh_closed(force=True)
        if self._closed is False:
            where = f"${self._api_keys_env} unset" if self._api_keys_env else "no api_keys_env"
            if self._redis is not None:
                where += f", Redis hash {self._keys.client_keys} empty"
            if self._allow_open:
                log.warning(
                    "no client API keys configured (%s) and auth.open is true: the gateway is "
                    "OPEN to every caller",
                    where,
                )
            else:
                self._log_empty_store(where)
        elif self._closed is None:
            log.warning("client keys unknown until Redis answers; requests are refused meanwhile")
        if self._admin_hash is None:
            log.info("no admin key (%s unset): admin endpoints are disabled", self._admin_key_env)

    async def authenticate(
        self, authorization: str | None, scope: Mapping[str, Any] | None = None
    ) -> ClientIdentity:
        """The caller's identity from its Authorization header; AuthenticationError (401) if refused.

        A refusal is reported to ``on_failure`` with its reason (``missing``: no bearer key;
        ``unknown``: a key that is not stored) and the caller's address read from ``scope`` (the
        ASGI connection; for the log, the key itself is never passed on). A key is always checked,
        whatever its address: a valid one is served; a refused one from an address the throttle
        holds off gets AuthThrottledError (429) instead of 401 (``gateway.keys.auth_throttle``).
        """
        if self._closed is not True:  # sticky once True: no check to await on a closed gateway
            await self._refresh_closed()
        if self.is_open:
            return ANONYMOUS  # open by config and no key exists: any or no key is fine
        token = bearer_token(authorization)
        if token is not None:
            key_hash = hash_key(token)
            identity = self._static.get(key_hash) or self._cached(key_hash) or await self._lookup(key_hash)
            if identity is not None:
                return identity
        # Refused: only now is the caller's address read (nothing of it on a valid key's path).
        client = self._addresses.of(scope)
        self._check_throttle(client)
        if self._closed is False:  # no key exists at all and the config does not allow open
            self._log_empty_store("key store empty")
        if token is None:
            self._refused("missing", client)
            raise AuthenticationError(
                "Missing API key: send it as 'Authorization: Bearer <key>'.", code="missing_api_key"
            )
        self._refused("unknown", client)
        raise AuthenticationError("Incorrect API key provided.")

    def _check_throttle(self, client: ClientAddress | None) -> None:
        """AuthThrottledError if the throttle holds ``client``'s address off (its key was refused)."""
        if self._throttle is None or client is None:
            return
        wait = self._throttle.held_off_s(client.host)
        if wait <= 0:
            return
        self._report("throttled", client)
        raise AuthThrottledError(
            "Too many requests from this address were refused for their API key; retry later.",
            headers={"retry-after": str(max(1, round(wait)))},
        )

    def _refused(self, reason: str, client: ClientAddress | None) -> None:
        if self._throttle is not None and client is not None:
            self._throttle.refused(client.host)
        self._report(reason, client)

    def _report(self, reason: str, client: ClientAddress | None) -> None:
        if self._on_failure is not None:
            try:
                self._on_failure(reason, str(client) if client is not None else None)
            except Exception:  # a metrics/log hook must never turn a 401 into a 500
                log.exception("auth-failure hook failed")

    def is_admin(self, authorization: str | None) -> bool:
        """Whether the header carries the admin key (False when no admin key is configured)."""
        try:
            self.check_admin(authorization)
        except AuthenticationError:
            return False
        return True

    @property
    def has_admin_key(self) -> bool:
        """Whether an admin key is configured (admin endpoints and the console need one)."""
        return self._admin_hash is not None

    def admin_token(self, purpose: str) -> str | None:
        """A token derived from the admin key for ``purpose`` (HMAC-SHA256 under the key's hash; the
        console's session cookie signs with it): never the key, and void once the key changes. None
        without an admin key."""
        if self._admin_hash is None:
            return None
        return hmac.new(self._admin_hash.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    def _log_empty_store(self, where: str) -> None:
        """Say (at most once a minute) why every request is refused."""
        now = self._clock()
        if now - self._empty_logged_at < 60.0:
            return
        self._empty_logged_at = now
        log.warning(
            "no client API keys configured (%s) and auth.open is false: every request is refused "
            "with 401 until a key exists (`cascade keys add`, $%s) or the config sets auth.open: true",
            where,
            self._api_keys_env or "CASCADE_API_KEYS",
        )

    def check_admin(self, authorization: str | None) -> None:
        """Raise AuthenticationError unless the header carries the admin key."""
        if self._admin_hash is None:
            raise AuthenticationError(
                f"Admin endpoints are disabled: set ${self._admin_key_env or 'CASCADE_ADMIN_KEY'}.",
                code="admin_disabled",
            )
        token = bearer_token(authorization)
        if token is None or not hmac.compare_digest(hash_key(token), self._admin_hash):
            raise AuthenticationError("Incorrect admin key provided.")

    def listed_identities(self, stored: Mapping[str, str | bytes]) -> list[ClientIdentity]:
        """Every client key's identity (never the key): the environment's, then ``stored`` (the
        Redis hash's records, key hash -> record, as the caller read them), sorted by key id."""
        found = dict(self._static)
        for key_hash, raw in stored.items():
            found.setdefault(key_hash, self._identity_from_record(key_hash, raw))
        return sorted(found.values(), key=lambda identity: identity.key_id or "")

    def _cached(self, key_hash: str) -> ClientIdentity | None:
        """A stored key's identity from the cache while its entry is fresh (no lookup to await)."""
        cached = self._cache.get(key_hash)
        return cached[0] if cached is not None and cached[1] > self._clock() else None

    async def _lookup(self, key_hash: str) -> ClientIdentity | None:
        """A Redis-stored key, through a short local cache (revocation takes up to cache_ttl_s)."""
        if self._redis is None:
            return None
        now = self._clock()
        cached = self._cache.get(key_hash)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            raw: bytes | str | None = await self._redis.execute("HGET", self._keys.client_keys, key_hash)
        except (RedisError, OSError) as exc:
            if cached is not None:  # stale but known: better than refusing a paying client
                return cached[0]
            raise AuthUnavailableError(
                "API keys cannot be checked right now (key store unreachable)."
            ) from exc
        identity = self._identity_from_record(key_hash, raw) if raw is not None else None
        if len(self._cache) > 10_000:
            self._cache.clear()  # bounded: unknown keys from a scanner must not grow memory forever
        self._cache[key_hash] = (identity, now + self._cache_ttl_s)
        return identity

    def _identity_from_record(self, key_hash: str, raw: str | bytes) -> ClientIdentity:
        try:
            record = json.loads(raw)
        except ValueError:
            record = {}
        record = record if isinstance(record, dict) else {}
        limit, name = record.get("limit_usd"), record.get("name")
        rates = parse_rate_limits(record.get("rate_limits"))
        period = parse_period(record.get("budget_period"))
        return ClientIdentity(
            key_id=key_id_of(key_hash),
            limit_usd=float(limit) if isinstance(limit, int | float) else self._default_limit,
            name=name if isinstance(name, str) else None,
            rate_limits=rates if rates is not None else self._default_rates,
            period=period or self._default_period,
            created_at=_unix_time(record.get("created_at")),
        )

    async def _refresh_closed(self, force: bool = False) -> None:
        """With Redis and no env keys: re-check every cache_ttl_s whether keys were added."""
        if self._closed is True or self._redis is None:
            return
        now = self._clock()
        if not force and now - self._closed_checked_at < self._cache_ttl_s:
            return
        self._closed_checked_at = now
        try:
            count = int(await self._redis.execute("HLEN", self._keys.client_keys))
        except (RedisError, OSError):
            return  # keep what we knew; unknown (None) refuses keyless requests
        if count > 0:
            if self._closed is False:
                log.info("client keys found in Redis: the gateway now requires an API key")
            self._closed = True
        else:
            self._closed = False


def authenticator_from_env(
    *,
    api_keys_env: str | None,
    admin_key_env: str | None,
    default_limit_usd: float | None,
    redis: Redis | RedisBatcher | None,
    keys: RedisKeys,
    allow_open: bool = False,
    on_failure: AuthFailed | None = None,
    throttle: AuthFailureThrottle | None = None,
    default_rate_limits: tuple[RateLimit, ...] = (),
    default_period: BudgetPeriod | None = None,
    addresses: ClientAddresses | None = None,
) -> Authenticator:
    """An Authenticator reading keys from the named environment variables (at call time)."""
    return Authenticator(
        env_keys=parse_env_keys(os.environ.get(api_keys_env)) if api_keys_env else (),
        admin_key=(os.environ.get(admin_key_env) or None) if admin_key_env else None,
        default_limit_usd=default_limit_usd,
        redis=redis,
        keys=keys,
        api_keys_env=api_keys_env,
        admin_key_env=admin_key_env,
        allow_open=allow_open,
        on_failure=on_failure,
        throttle=throttle,
        default_rate_limits=default_rate_limits,
        default_period=default_period,
        addresses=addresses,
    )


def _unix_time(value: object) -> float | None:
    """An ISO-8601 time (a key record's ``created_at``) as unix seconds, or None."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()

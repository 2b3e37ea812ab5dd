"""The gateway's shared state: policy store, client keys, spend limits, and the Redis behind them.

``build_shared_state(...)`` wires them from the config fields it is given (no I/O: Redis clients
connect on first use); the app calls ``start()`` at startup and ``close()`` at shutdown. Without
``redis_url`` everything is in process (one replica). With it, replicas share the policy (when
``policy`` is a ``redis://`` URL), keys and spend.

Which Redis: ``redis_url`` holds keys and spend; a ``redis://`` policy URL holds the policy. When
only the policy URL is given, that same Redis holds keys and spend too.

Two Redis clients per Redis: the request path (client keys, spend) uses one with no retries, through
one ``RedisBatcher`` (gateway.redis.batch) that sends the commands of an event-loop iteration as one
pipeline bounded by ``redis_timeout_s``, so a frozen Redis costs a request milliseconds; the policy
watcher and the health loop use one with longer timeouts. The health loop (1 s) also lets the
spend limiter reconcile (write back spend counted in process during an outage, see gateway.keys.spend).

Metrics the app exports from here: ``redis_up`` (-> ``cascade_redis_up``; updated by a 1 s PING loop
and by every Redis operation), ``on_policy_failure`` (-> ``cascade_policy_reload_failures_total``)
``on_spend_fallback`` (-> ``cascade_spend_fallback_total{reason}``) and ``on_limits_degraded``
(-> ``cascade_limits_degraded``, ``cascade_limits_degraded_entered_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.assembly.policy_store import FilePolicyStore, PolicyStore, RedisPolicyStore
from gateway.config.settings import AuthConfig, BudgetConfig
from gateway.keys.auth import Authenticator, AuthFailed, ClientIdentity, authenticator_from_env
from gateway.keys.auth_throttle import AuthFailureThrottle
from gateway.keys.client_address import ClientAddresses, Network
from gateway.keys.ledger import Reservation
from gateway.keys.spend import SpendLimiter
from gateway.redis.batch import RedisBatcher
from gateway.redis.keys import RedisKeys, is_redis_url
from policies import Policy
from policies.capabilities import ModelCapabilities
from redaction import redact_url

log = logging.getLogger("cascade.state")

__all__ = ["ClientIdentity", "Reservation", "SharedState", "build_shared_state", "connect_redis"]


def connect_redis(url: str, command_timeout_s: float | None = None) -> aioredis.Redis:
    """A Redis client with short timeouts: a dead Redis must not stall requests for long.

    ``command_timeout_s`` (request path): connecting bounded by it, and no retries (redis-py
    otherwise retries a timed-out command 3 times). Its commands have no socket timeout of their
    own: they are sent through a ``RedisBatcher`` bounding each pipeline by ``command_timeout_s``
    (redis-py would wrap every write in a task to time it). Without it: 1 s connect, 2 s per command.
    """
    if command_timeout_s is not None:
        return aioredis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=command_timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=10,
        )
    return aioredis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=1.0,
        socket_timeout=2.0,
        health_check_interval=10,
    )


@dataclass
class SharedState:
    """Everything replicas share; see the module docstring."""

    policy_store: PolicyStore
    authenticator: Authenticator
    spend: SpendLimiter
    redis: aioredis.Redis | None = None
    policy_redis: aioredis.Redis | None = None  # only when distinct from ``redis``
    request_redis: aioredis.Redis | None = None  # same Redis as ``redis``, request-path timeouts
    # The request path's batcher on ``request_redis`` (keys and spend; the console's records).
    request_path: RedisBatcher | None = None
    keys: RedisKeys = field(default_factory=RedisKeys)
    health_interval_s: float = 1.0
    redis_up: bool | None = None
    # Run after every good check of the 1 s loop (the circuit breakers' refresh: breaker_share).
    ticks: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    _health_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Initial policy load, key discovery, and the watchers (file poll or Redis pub/sub)."""
        if self.redis is not None:
            if await self._ping():
                await self.spend.maintain()  # learn the spend epoch before the first request
            self._health_task = asyncio.create_task(self._health_loop(), name="redis-health")
        await self.policy_store.start()
        await self.authenticator.start()

    async def close(self) -> None:
        """Stop the watchers and close the Redis connections."""
        await self.policy_store.close()
        if self._health_task is not None:
            self._health_task.cancel()
            await asyncio.gather(self._health_task, return_exceptions=True)
            self._health_task = None
            await self.spend.leave()
        for client in (self.redis, self.policy_redis, self.request_redis):
            if client is not None:
                with contextlib.suppress(RedisError, OSError):
                    await client.aclose()

    def readiness(self) -> dict[str, Any]:
        """State of the policy and Redis for /readyz (the admin's detailed view).

        ``policy``: a policy is loaded (requests can be served). ``redis``: None without Redis, else
        whether it answered the last check (the 1 s PING loop and every operation; never a PING per
        /readyz call, so a frozen Redis cannot make the probe itself time out). ``policy_stale``: the
        policy comes from Redis and Redis is down, so a push made now would not be seen.
        """
        redis_ok: bool | None = None
        if self.redis is not None or self.policy_redis is not None:
            redis_ok = self.redis_up
        store = self.policy_store.status()
        return {
            "policy": self.policy_store.current is not None,
            "policy_id": store["policy_id"],
            "policy_source": store["source"],
            "policy_version": store.get("version"),
            "policy_reload_failures": store["reload_failures"],
            "policy_last_error": store["last_error"],
            "policy_watching": store["watching"],
            "policy_stale": store["source"] == "redis" and redis_ok is False,
            "redis": redis_ok,
            "auth_open": self.authenticator.is_open,
        }

    def mark_redis(self, up: bool) -> None:
        """Record whether Redis answered the last operation (reported by cascade_redis_up)."""
        self.redis_up = up

    async def _ping(self) -> bool:
        ok = True
        for client in (self.redis, self.policy_redis):
            if client is None:
                continue
            try:
                await asyncio.wait_for(client.ping(), timeout=1.0)
            except (RedisError, OSError, TimeoutError):
                ok = False
        self.mark_redis(ok)
        return ok

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            if await self._ping():
                await self.spend.maintain()
                for tick in self.ticks:
                    await tick()


@dataclass(frozen=True)
class _RedisClients:
    """The Redis clients of one app: background work, the request path (short timeout, behind one
    batcher) and the policy store's (the same client when the policy lives in the state's Redis)."""

    redis: aioredis.Redis | None
    request_redis: aioredis.Redis | None
    request_path: RedisBatcher | None
    policy_redis: aioredis.Redis | None
    policy_url: str | None


def _redis_clients(policy: str, redis_url: str | None, redis_timeout_s: float) -> _RedisClients:
    policy_url = policy if is_redis_url(policy) else None
    state_url = redis_url or policy_url
    redis = connect_redis(state_url) if state_url else None
    request_redis = connect_redis(state_url, redis_timeout_s) if state_url else None
    # One batcher for keys and spend: their commands of one loop iteration share a pipeline.
    request_path = RedisBatcher(request_redis, redis_timeout_s) if request_redis is not None else None
    policy_redis: aioredis.Redis | None = None
    if policy_url is not None:
        policy_redis = redis if policy_url == state_url else connect_redis(policy_url)
    return _RedisClients(redis, request_redis, request_path, policy_redis, policy_url)


class _RedisStatusRelay:
    """Forwards the stores' Redis up/down reports to the state, which is built after them."""

    def __init__(self) -> None:
        self.state: SharedState | None = None

    def __call__(self, up: bool) -> None:
        if self.state is not None:
            self.state.mark_redis(up)


def _policy_store(
    policy: str,
    clients: _RedisClients,
    keys: RedisKeys,
    report_redis: Callable[[bool], None],
    file_poll_interval_s: float,
    **checks: Any,
) -> PolicyStore:
    """The policy store: in Redis when the policy is a Redis URL, else the file, polled."""
    if clients.policy_redis is not None:
        return RedisPolicyStore(
            clients.policy_redis,
            keys,
            location=redact_url(clients.policy_url or ""),
            on_redis_status=report_redis,
            **checks,
        )
    return FilePolicyStore(policy, poll_interval_s=file_poll_interval_s, **checks)


def _authenticator(
    auth: AuthConfig,
    budgets: BudgetConfig,
    clients: _RedisClients,
    keys: RedisKeys,
    on_failure: AuthFailed | None,
    trusted_proxies: Collection[Network],
) -> Authenticator:
    return authenticator_from_env(
        api_keys_env=auth.api_keys_env,
        admin_key_env=auth.admin_key_env,
        default_limit_usd=budgets.limit_usd,
        redis=clients.request_path,
        keys=keys,
        allow_open=auth.open,
        on_failure=on_failure,
        throttle=AuthFailureThrottle(auth.failure_limit, auth.failure_window_s),
        default_rate_limits=tuple(budgets.rate_limits),
        default_period=budgets.period,
        addresses=ClientAddresses(trusted_proxies),
    )


def _spend_limiter(
    budgets: BudgetConfig,
    clients: _RedisClients,
    keys: RedisKeys,
    redis_timeout_s: float,
    report_redis: Callable[[bool], None],
    on_fallback: Callable[[str], None] | None,
    on_rate_limited: Callable[[str], None] | None,
    on_degraded: Callable[[bool], None] | None,
) -> SpendLimiter:
    return SpendLimiter(
        window_s=budgets.window_s,
        redis=clients.request_path,
        keys=keys,
        on_redis_status=report_redis,
        on_fallback=on_fallback,
        on_rate_limited=on_rate_limited,
        timeout_s=redis_timeout_s,
        on_redis_down=budgets.on_redis_down,
        outage_share=budgets.outage_share,
        outage_after_s=budgets.outage_after_s,
        on_degraded=on_degraded,
        maintenance_redis=clients.redis,
    )


def build_shared_state(
    *,
    policy: str,
    redis_url: str | None,
    redis_timeout_s: float,
    auth: AuthConfig,
    budgets: BudgetConfig,
    known_models: Collection[str],
    capabilities: Mapping[str, ModelCapabilities] | None = None,
    on_policy_loaded: Callable[[Policy], None],
    on_policy_failure: Callable[[str], None],
    on_spend_fallback: Callable[[str], None] | None = None,
    on_rate_limited: Callable[[str], None] | None = None,
    on_limits_degraded: Callable[[bool], None] | None = None,
    on_auth_failure: AuthFailed | None = None,
    trusted_proxies: Collection[Network] = (),
    keys: RedisKeys | None = None,
    file_poll_interval_s: float = 0.25,
) -> SharedState:
    """Wire policy store, authenticator and spend limiter (call start() next).

    ``policy``, ``redis_url``, ``redis_timeout_s``, ``auth``, ``budgets`` and ``trusted_proxies`` are
    the config's fields of those names; ``known_models`` the configured model names (a policy
    routing elsewhere is refused),
    ``capabilities`` their declared capabilities (a policy whose scorer needs more is refused).
    ``keys`` defaults to the contract names (prefix ``cascade``, or ``$CASCADE_REDIS_PREFIX``).
    Creating Redis clients does not connect; nothing touches the network before ``start()``.
    """
    keys = keys or RedisKeys.from_env()
    clients = _redis_clients(policy, redis_url, redis_timeout_s)
    report_redis = _RedisStatusRelay()
    store = _policy_store(
        policy,
        clients,
        keys,
        report_redis,
        file_poll_interval_s,
        on_loaded=on_policy_loaded,
        on_failure=on_policy_failure,
        known_models=known_models,
        capabilities=capabilities,
    )
    authenticator = _authenticator(auth, budgets, clients, keys, on_auth_failure, trusted_proxies)
    hooks = (on_spend_fallback, on_rate_limited, on_limits_degraded)
    spend = _spend_limiter(budgets, clients, keys, redis_timeout_s, report_redis, *hooks)
    report_redis.state = SharedState(
        policy_store=store,
        authenticator=authenticator,
        spend=spend,
        redis=clients.redis,
        policy_redis=clients.policy_redis if clients.policy_redis is not clients.redis else None,
        request_redis=clients.request_redis,
        request_path=clients.request_path,
        keys=keys,
    )
    return report_redis.state

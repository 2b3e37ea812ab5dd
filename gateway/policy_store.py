"""Where the served policy comes from: a watched file, or Redis with pub/sub hot reload.

Both sources keep the **last good policy**: a new policy that does not parse, does not validate or
cannot be served by this gateway (scorer ``external``, a route to a model the config lacks) is
rejected, logged and counted, and the previous one stays in service (docs/contracts.md#faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.redis_keys import RedisKeys
from policies import Policy, PolicyError, PolicyInvalidError, parse_policy

log = logging.getLogger("cascade.policy")

_UNSEEN = object()

PolicyLoaded = Callable[[Policy], None]
PolicyFailed = Callable[[str], None]


class PolicySourceUnavailableError(PolicyError):
    """The policy source cannot be read right now (Redis down, no policy pushed yet)."""


def check_servable(policy: Policy, known_models: Collection[str] | None) -> None:
    """Raise PolicyInvalidError if this gateway cannot serve ``policy``.

    ``known_models`` are the model names of the gateway config; every model a tier or envelope point
    routes to must be one of them (None skips that check).
    """
    if policy.scorer.name == "external":
        raise PolicyInvalidError(
            f"policy {policy.policy_id}: scorer 'external' is a precomputed score the gateway cannot "
            "compute from live logprobs; calibrate with a logprob scorer to serve it"
        )
    if known_models is None:
        return
    routed = {m for tier in policy.tiers.values() for route in tier.routes for m in route.models}
    routed |= {m for point in policy.envelope for m in point.models}
    missing = sorted(routed - set(known_models))
    if missing:
        raise PolicyInvalidError(
            f"policy {policy.policy_id} routes to model(s) {', '.join(missing)} that the gateway config "
            f"does not define (configured: {', '.join(sorted(known_models))})"
        )


class PolicyStore:
    """The current policy and its reload history; subclasses say where policies come from."""

    kind = "none"

    def __init__(
        self,
        *,
        source: str,
        on_loaded: PolicyLoaded | None = None,
        on_failure: PolicyFailed | None = None,
        known_models: Collection[str] | None = None,
    ):
        self.source = source
        self.current: Policy | None = None
        self.reloads = 0
        self.reload_failures = 0
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self._on_loaded = on_loaded
        self._on_failure = on_failure
        self._known_models = known_models
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load the initial policy (a failure is recorded, not raised) and start watching."""
        # A failure is recorded by reload(); readiness reports "no policy" until a good one arrives.
        with contextlib.suppress(PolicyError):
            await self.reload()
        self._task = asyncio.create_task(self._watch(), name=f"policy-watch-{self.kind}")

    async def close(self) -> None:
        """Stop watching."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def reload(self) -> Policy:
        """Read the source now; return the new current policy or raise PolicyError (last good kept)."""
        raise NotImplementedError

    async def _watch(self) -> None:
        """Background loop calling reload() when the source changes."""

    def status(self) -> dict[str, Any]:
        """What /readyz and /admin report about the policy."""
        return {
            "source": self.kind,
            "location": self.source,
            "policy_id": self.current.policy_id if self.current else None,
            "loaded_at": self.loaded_at,
            "reloads": self.reloads,
            "reload_failures": self.reload_failures,
            "last_error": self.last_error,
        }

    def _install(self, raw: bytes | str, where: str) -> Policy:
        """Parse, check and switch to a policy; on any problem record the failure and re-raise."""
        try:
            policy = parse_policy(raw, source=where)
            check_servable(policy, self._known_models)
        except PolicyInvalidError as exc:
            self._record_failure(str(exc))
            raise
        previous = self.current
        self.current = policy
        self.loaded_at = time.time()
        self.last_error = None
        if previous is None or previous.policy_id != policy.policy_id:
            self.reloads += 1
            log.info("policy %s loaded from %s", policy.policy_id, where)
            if self._on_loaded is not None:
                try:
                    self._on_loaded(policy)
                except Exception:  # a metrics hook must not take the watcher down
                    log.exception("policy-loaded hook failed")
        return policy

    def _record_failure(self, message: str) -> None:
        self.reload_failures += 1
        self.last_error = message
        kept = self.current.policy_id if self.current else "none"
        log.warning("policy rejected, keeping last good policy (%s): %s", kept, message)
        if self._on_failure is not None:
            try:
                self._on_failure(message)
            except Exception:
                log.exception("policy-failure hook failed")


class FilePolicyStore(PolicyStore):
    """A policy file, polled for changes (inode, size, mtime) every ``poll_interval_s`` seconds.

    Polling a stat() is cheap and works on every filesystem, including Kubernetes ConfigMap mounts
    (which swap a symlink) where inotify-style watchers miss the change. Write policies atomically
    (``cascade calibrate`` and ``policies.save_policy`` do): a half-written file is rejected and
    counted as a failure, then picked up once complete.
    """

    kind = "file"

    def __init__(self, path: str | Path, *, poll_interval_s: float = 0.25, **kwargs: Any):
        super().__init__(source=str(path), **kwargs)
        self.path = Path(path)
        self.poll_interval_s = poll_interval_s
        self._seen: tuple[int, ...] | None = None

    def _signature(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)  # follows symlinks: a ConfigMap swap changes the target inode
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    async def reload(self) -> Policy:
        """Read and install the file; PolicyInvalidError (counted, last good kept) on any problem."""
        self._seen = self._signature()
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            message = f"{self.path}: cannot read ({exc.strerror})"
            self._record_failure(message)
            raise PolicyInvalidError(message) from exc
        return self._install(raw, str(self.path))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            signature = self._signature()
            if signature == self._seen:
                continue
            # A failure is recorded; _seen now holds this signature, so it is counted once per change.
            with contextlib.suppress(PolicyError):
                await self.reload()


class RedisPolicyStore(PolicyStore):
    """The policy at ``{prefix}:policy:current``, versioned, hot-reloaded through pub/sub.

    ``cascade policy push`` SETs the JSON and INCRs ``{prefix}:policy:version`` in one transaction,
    then PUBLISHes the version on ``{prefix}:policy:updates``. Every replica subscribes and reloads on
    a message; it also compares the version every ``resync_interval_s`` seconds, because pub/sub
    delivers at most once and a replica that was disconnected would miss the message. While Redis is
    unreachable the last good policy keeps being served and ``redis_up`` is False; on reconnection
    the replica catches up with whatever was pushed meanwhile.
    """

    kind = "redis"

    def __init__(
        self,
        redis: Redis,
        keys: RedisKeys,
        *,
        location: str,
        resync_interval_s: float = 1.0,
        retry_interval_s: float = 0.5,
        on_redis_status: Callable[[bool], None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(source=location, **kwargs)
        self._redis = redis
        self._keys = keys
        self.resync_interval_s = resync_interval_s
        self.retry_interval_s = retry_interval_s
        self.version: int | None = None
        self.redis_up: bool | None = None
        # The version last read (good or bad): a bad version is counted once, not on every resync.
        self._seen_version: object = _UNSEEN
        self._on_redis_status = on_redis_status

    def status(self) -> dict[str, Any]:
        """Policy status plus the Redis version and whether Redis is reachable."""
        return {**super().status(), "version": self.version, "redis_up": self.redis_up}

    async def reload(self) -> Policy:
        """Read the current policy from Redis now.

        Raises PolicySourceUnavailableError when Redis is unreachable or holds no policy (not
        counted as a reload failure), PolicyInvalidError when the stored policy is bad (counted).
        """
        try:
            raw, version = await self._redis.mget(self._keys.policy_current, self._keys.policy_version)
        except (RedisError, OSError) as exc:
            self._mark_redis(False)
            self.last_error = f"redis unreachable: {exc}"
            raise PolicySourceUnavailableError(self.last_error) from exc
        self._mark_redis(True)
        if raw is None:
            self.last_error = (
                f"no policy at Redis key {self._keys.policy_current}; push one with `cascade policy push`"
            )
            self._seen_version = None
            raise PolicySourceUnavailableError(self.last_error)
        number = int(version) if version is not None else None
        self._seen_version = number
        policy = self._install(raw, f"redis:{self._keys.policy_current}@v{number}")
        self.version = number  # the version of the policy being served
        return policy

    async def _sync(self) -> None:
        """Reload if the stored version differs from the one served; Redis errors propagate."""
        version = await self._redis.get(self._keys.policy_version)
        seen = int(version) if version is not None else None
        if seen != self._seen_version:
            try:
                await self.reload()
            except PolicyInvalidError:
                pass  # counted once: reload() recorded this version as seen
            except PolicySourceUnavailableError as exc:
                if isinstance(exc.__cause__, (RedisError, OSError)):
                    raise exc.__cause__ from None

    async def _watch(self) -> None:
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.policy_updates)
                self._mark_redis(True)
                await self._sync()  # catch up with pushes made while we were not subscribed
                last_sync = time.monotonic()
                while True:
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=self.resync_interval_s
                    )
                    if message is not None or time.monotonic() - last_sync >= self.resync_interval_s:
                        await self._sync()
                        last_sync = time.monotonic()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                if self.redis_up is not False:
                    kept = self.current.policy_id if self.current else "none"
                    log.warning("redis unreachable (%s); serving last good policy %s", exc, kept)
                self._mark_redis(False)
                await asyncio.sleep(self.retry_interval_s)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()

    def _mark_redis(self, up: bool) -> None:
        if up and self.redis_up is False:
            log.info("redis reachable again")
        self.redis_up = up
        if self._on_redis_status is not None:
            self._on_redis_status(up)

"""Where the served policy comes from: a watched file, or Redis with pub/sub hot reload.

Both sources keep the **last good policy**: a new policy that does not parse, does not validate or
cannot be served by this gateway (scorer ``external``, a route to a model the config lacks, a
``policy_id`` that is not its content hash, a scorer needing more than a scored model's declared
capabilities give) is rejected, logged and counted, and the previous one
stays in service (docs/contracts.md#faults). No failure stops a watcher: whatever goes wrong while
reading a source (corrupt content, a corrupt version key, a bug) is caught, logged, counted once per
distinct cause and shown in ``status()``, and the watcher keeps watching.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.redis.keys import RedisKeys
from policies import Policy, PolicyError, PolicyInvalidError, parse_policy
from policies.capabilities import ModelCapabilities
from policies.errors import quoted
from publishing import check_servable

log = logging.getLogger("cascade.policy")

_UNSEEN = object()

PolicyLoaded = Callable[[Policy], None]
PolicyFailed = Callable[[str], None]


class PolicySourceUnavailableError(PolicyError):
    """The policy source cannot be read right now (Redis down, no policy pushed yet)."""


class PolicyStore:
    """The current policy and its reload history; subclasses say where policies come from."""

    kind = "none"
    retry_interval_s = 0.5

    def __init__(
        self,
        *,
        source: str,
        on_loaded: PolicyLoaded | None = None,
        on_failure: PolicyFailed | None = None,
        known_models: Collection[str] | None = None,
        capabilities: Mapping[str, ModelCapabilities] | None = None,
    ):
        self.source = source
        self.current: Policy | None = None
        self.reloads = 0
        self.reload_failures = 0
        # Checks of the source the watcher has finished (changed or not, failed or not): what a
        # caller waits for to know the watcher looked again.
        self.checks = 0
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self._on_loaded = on_loaded
        self._on_failure = on_failure
        self._known_models = known_models
        self._capabilities = capabilities
        self._task: asyncio.Task[None] | None = None
        self._last_failure: str | None = None  # counted once until something succeeds or changes

    async def start(self) -> None:
        """Load the initial policy (a failure is recorded, never raised) and start watching.

        A replica that starts against a bad source starts anyway: not ready (no policy) until a
        good one arrives, instead of failing to start.
        """
        await self._reload_quietly()
        self._task = asyncio.create_task(self._watch_forever(), name=f"policy-watch-{self.kind}")

    async def _reload_quietly(self) -> None:
        """reload(), with every failure recorded (PolicyError already is) instead of raised."""
        try:
            await self.reload()
        except PolicyError:
            pass  # recorded by reload()
        except Exception as exc:  # a bug or an unforeseen input: recorded, never fatal
            self._record_failure(_describe(exc), unexpected=True)

    async def _watch_forever(self) -> None:
        """Run ``_watch``; if it ever raises, record why and start it again after a pause."""
        while True:
            try:
                await self._watch()
                return  # a source without a watch loop
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._record_failure(f"policy watcher failed: {_describe(exc)}", unexpected=True)
                await asyncio.sleep(self.retry_interval_s)

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
            "watching": self._task is not None and not self._task.done(),
        }

    def _install(self, raw: bytes | str, where: str) -> Policy:
        """Parse, check and switch to a policy; on any problem record the failure and re-raise."""
        try:
            policy = parse_policy(raw, source=where)
            check_servable(policy, self._known_models, self._capabilities)
        except PolicyInvalidError as exc:
            self._record_failure(str(exc))
            raise
        except Exception as exc:  # e.g. RecursionError from a pathological document
            message = f"{where}: cannot be read as a policy ({_describe(exc)})"
            self._record_failure(message, unexpected=True)
            raise PolicyInvalidError(message) from exc
        previous = self.current
        self.current = policy
        self.loaded_at = time.time()
        self.last_error = None
        self._last_failure = None
        if previous is None or previous.policy_id != policy.policy_id:
            self.reloads += 1
            log.info("policy %s loaded from %s", policy.policy_id, where)
            if self._on_loaded is not None:
                try:
                    self._on_loaded(policy)
                except Exception:  # a metrics hook must not take the watcher down
                    log.exception("policy-loaded hook failed")
        return policy

    def _record_failure(self, message: str, *, unexpected: bool = False) -> None:
        """Show ``message`` in status(); log and count it unless it repeats the previous failure."""
        self.last_error = message
        if message == self._last_failure:
            return  # the same cause seen again (a resync): counted and logged once
        self._last_failure = message
        self.reload_failures += 1
        kept = self.current.policy_id if self.current else "none"
        log.warning(
            "policy rejected, keeping last good policy (%s): %s", kept, message, exc_info=unexpected or None
        )
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
            if signature != self._seen:
                # A failure is recorded; _seen now holds this signature: counted once per change.
                await self._reload_quietly()
            self.checks += 1


class RedisPolicyStore(PolicyStore):
    """The policy at ``{prefix}:policy:current``, versioned, hot-reloaded through pub/sub.

    ``cascade policy push`` SETs the JSON and INCRs ``{prefix}:policy:version`` in one transaction,
    then PUBLISHes the version on ``{prefix}:policy:updates``. Every replica subscribes and re-reads
    on a message; it also re-reads every ``resync_interval_s`` seconds, because pub/sub delivers at
    most once and a replica that was disconnected would miss the message.

    A change is detected by **content**, not only by version: after Redis loses its data the version
    restarts at 1, so a replica that saw version 1 before must still notice that the stored policy
    is another one. The version is informational (reported, never trusted alone); a version key that
    is not an integer is recorded as a failure and does not stop a valid policy from being served.
    While Redis is unreachable, or holds no policy, the last good policy keeps being served and
    ``redis_up`` says whether Redis answers; on reconnection the replica catches up.
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
        # What was last read (good or bad, content and version as stored): a bad policy is counted
        # once, not on every resync, and any change of either is re-read.
        self._seen: object = _UNSEEN
        self._seen_served = False  # whether the content in _seen is the policy being served
        self._on_redis_status = on_redis_status

    def status(self) -> dict[str, Any]:
        """Policy status plus the Redis version and whether Redis is reachable."""
        return {**super().status(), "version": self.version, "redis_up": self.redis_up}

    async def reload(self) -> Policy:
        """Read the current policy from Redis now.

        Raises PolicySourceUnavailableError when Redis is unreachable or holds no policy (not
        counted as a reload failure), PolicyInvalidError when the stored policy is bad (counted).
        """
        raw, version = await self._read()
        return self._apply(raw, version)

    async def _read(self) -> tuple[str | None, str | None]:
        try:
            raw, version = await self._redis.mget(self._keys.policy_current, self._keys.policy_version)
        except (RedisError, OSError) as exc:
            self._mark_redis(False)
            self.last_error = f"redis unreachable: {exc}"
            raise PolicySourceUnavailableError(self.last_error) from exc
        self._mark_redis(True)
        return raw, version

    def _apply(self, raw: str | None, version: str | None) -> Policy:
        """Install the stored policy ``raw`` (with its stored ``version``); see reload()."""
        self._seen = (raw, version)
        self._seen_served = False
        if raw is None:
            self.last_error = (
                f"no policy at Redis key {self._keys.policy_current}; push one with `cascade policy push`"
            )
            raise PolicySourceUnavailableError(self.last_error)
        policy = self._install(raw, f"redis:{self._keys.policy_current}")
        self._seen_served = True
        self._note_version(version, policy)
        return policy

    def _note_version(self, version: str | None, policy: Policy) -> None:
        """Report the stored version of the served policy; a non-integer one is a recorded failure."""
        self.version = _parse_version(version)
        if version is not None and self.version is None:
            self._record_failure(
                f"Redis key {self._keys.policy_version} holds {quoted(version)}, not an integer; serving "
                f"policy {policy.policy_id} by content (the next `cascade policy push` restarts it at 1)"
            )

    async def _sync(self) -> None:
        """Re-read if the stored content or version differs from what was last read.

        Redis errors propagate (the watch loop marks Redis down and reconnects); a bad policy is
        recorded by _apply() and not retried until the stored content changes.
        """
        raw, version = await self._redis.mget(self._keys.policy_current, self._keys.policy_version)
        self._mark_redis(True)
        if self._seen is not _UNSEEN and raw == self._seen[0]:  # type: ignore[index]
            if version != self._seen[1]:  # type: ignore[index]
                self._seen = (raw, version)
                if self._seen_served and self.current is not None:
                    self._note_version(version, self.current)
            return
        with contextlib.suppress(PolicyError):
            self._apply(raw, version)

    async def _watch(self) -> None:
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.policy_updates)
                self._mark_redis(True)
                await self._sync()  # catch up with pushes made while we were not subscribed
                self.checks += 1
                last_sync = time.monotonic()
                while True:
                    message = await pubsub.get_message(
                        ignore_subscribe_messages=True, timeout=self.resync_interval_s
                    )
                    if message is not None or time.monotonic() - last_sync >= self.resync_interval_s:
                        await self._sync()
                        self.checks += 1
                        last_sync = time.monotonic()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as exc:
                if self.redis_up is not False:
                    kept = self.current.policy_id if self.current else "none"
                    log.warning("redis unreachable (%s); serving last good policy %s", exc, kept)
                self._mark_redis(False)
                self.checks += 1  # a check that found Redis unreachable
                await asyncio.sleep(self.retry_interval_s)
            except Exception as exc:  # anything else: recorded, and the watcher carries on
                self._record_failure(f"policy watcher failed: {_describe(exc)}", unexpected=True)
                await asyncio.sleep(self.retry_interval_s)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _mark_redis(self, up: bool) -> None:
        if up and self.redis_up is False:
            log.info("redis reachable again")
        self.redis_up = up
        if self._on_redis_status is not None:
            self._on_redis_status(up)


def _parse_version(value: str | None) -> int | None:
    """The stored version as an integer; None when absent or not an integer."""
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    """``Type: message`` on one line, bounded (messages can quote huge inputs)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__

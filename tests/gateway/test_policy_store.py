"""Policy sources: a watched file and Redis pub/sub; the last good policy survives bad pushes and outages."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.assembly import policy_store
from gateway.assembly.policy_store import FilePolicyStore, RedisPolicyStore
from gateway.redis.keys import RedisKeys
from policies import Policy, build_policy, load_policy, save_policy
from publishing import push_policy
from tests.support.policy_files import two_model_document
from tests.support.shared_redis import REDIS_URL, RedisLink

MODELS = ["small", "large"]


def make_policy(threshold: float = 0.4, scorer: str = "mean_token_negentropy") -> Policy:
    """A valid two-model policy whose id depends on ``threshold``."""
    return build_policy(two_model_document(threshold, scorer={"name": scorer, "top_k": 5}))


async def wait_until(condition: Callable[[], bool], timeout_s: float = 3.0) -> float:
    """Seconds until ``condition()`` held; fails the test after ``timeout_s``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"condition not met within {timeout_s}s")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def wait_for_checks(store: policy_store.PolicyStore, count: int = 3) -> None:
    """Until the watcher has finished ``count`` more checks of its source (changed or not)."""
    target = store.checks + count
    await wait_until(lambda: store.checks >= target, 10.0)


class Recorder:
    """Collects the store's callbacks."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.failures: list[str] = []

    def hooks(self) -> dict[str, Any]:
        return {"on_loaded": lambda p: self.loaded.append(p.policy_id), "on_failure": self.failures.append}


# ---------------------------------------------------------------- file source


@pytest.fixture
async def file_store(tmp_path: Path) -> AsyncIterator[tuple[FilePolicyStore, Path, Recorder]]:
    path = tmp_path / "policy.json"
    save_policy(make_policy(0.4), path)
    recorder = Recorder()
    store = FilePolicyStore(path, poll_interval_s=0.05, known_models=MODELS, **recorder.hooks())
    await store.start()
    yield store, path, recorder
    await store.close()


async def test_file_store_switches_to_a_new_valid_policy(file_store) -> None:
    store, path, recorder = file_store
    first = store.current
    assert first is not None and recorder.loaded == [first.policy_id]
    new = make_policy(0.7)
    save_policy(new, path)
    await wait_until(lambda: store.current.policy_id == new.policy_id)
    assert store.current.tiers["balanced"].routes[0].thresholds == [0.7]
    assert recorder.loaded == [first.policy_id, new.policy_id]
    assert store.reload_failures == 0


async def test_file_store_keeps_last_good_policy_and_counts_an_invalid_file_once(file_store) -> None:
    store, path, recorder = file_store
    good = store.current
    path.write_text('{"schema_version": 1, "tiers": ')  # truncated JSON
    await wait_until(lambda: store.reload_failures == 1)
    await wait_for_checks(store)  # several more polls of the same bad file
    assert store.reload_failures == 1
    assert store.current is good
    assert "not valid JSON" in recorder.failures[0]
    assert store.status()["last_error"] == recorder.failures[0]
    # A later valid file is picked up again and clears the error.
    fixed = make_policy(0.9)
    save_policy(fixed, path)
    await wait_until(lambda: store.current.policy_id == fixed.policy_id)
    assert store.status()["last_error"] is None


async def test_file_store_rejects_a_schema_violation(file_store) -> None:
    store, path, _ = file_store
    good = store.current
    document = good.model_dump(mode="json")
    document["tiers"]["balanced"]["routes"][0]["thresholds"] = []  # 2 models need 1 threshold
    path.write_text(json.dumps(document))
    await wait_until(lambda: store.reload_failures == 1)
    assert store.current is good
    assert "threshold" in store.last_error


async def test_file_store_rejects_a_policy_routing_to_an_unconfigured_model(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    save_policy(make_policy(), path)
    store = FilePolicyStore(path, known_models=["small"])
    await store.start()
    try:
        assert store.current is None
        assert store.reload_failures == 1
        assert "large" in store.last_error
    finally:
        await store.close()


async def test_file_store_refuses_the_external_scorer(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    save_policy(make_policy(scorer="external"), path)
    store = FilePolicyStore(path, known_models=MODELS)
    await store.start()
    try:
        assert store.current is None
        assert "external" in store.last_error
    finally:
        await store.close()


async def test_file_store_loads_a_policy_file_that_appears_after_start(tmp_path: Path) -> None:
    path = tmp_path / "later.json"
    store = FilePolicyStore(path, poll_interval_s=0.05, known_models=MODELS)
    await store.start()
    try:
        assert store.current is None and store.reload_failures == 1
        save_policy(make_policy(0.3), path)
        await wait_until(lambda: store.current is not None)
    finally:
        await store.close()


# ---------------------------------------------------------------- Redis source


async def start_redis_store(
    url: str, keys: RedisKeys, recorder: Recorder | None = None, resync_interval_s: float = 1.0
) -> RedisPolicyStore:
    client = aioredis.from_url(url, decode_responses=True, socket_connect_timeout=1, socket_timeout=2)
    store = RedisPolicyStore(
        client,
        keys,
        location=url,
        retry_interval_s=0.1,
        resync_interval_s=resync_interval_s,
        known_models=MODELS,
        **(recorder.hooks() if recorder else {}),
    )
    await store.start()
    return store


async def stop_redis_store(store: RedisPolicyStore) -> None:
    await store.close()
    await store._redis.aclose()


async def test_a_push_reaches_two_replicas_by_its_notification(tmp_path: Path, keys, sync_redis) -> None:
    path = tmp_path / "p.json"
    save_policy(make_policy(0.4), path)
    push_policy(sync_redis, load_policy(path), keys)
    # No periodic re-read during the test: only the pushed notification can make them switch.
    replicas = [await start_redis_store(REDIS_URL, keys, resync_interval_s=3600) for _ in range(2)]
    try:
        assert all(r.current.tiers["balanced"].routes[0].thresholds == [0.4] for r in replicas)
        new = make_policy(0.6)
        save_policy(new, path)
        await wait_until(lambda: all(r.checks >= 1 for r in replicas))  # both subscribed and caught up
        pushed = load_policy(path)
        version = push_policy(sync_redis, pushed, keys)
        assert pushed.policy_id == new.policy_id and version == 2
        await wait_until(lambda: all(r.current.policy_id == new.policy_id for r in replicas), 10.0)
        assert [r.version for r in replicas] == [2, 2]
        assert [r.checks for r in replicas] == [2, 2]  # the catch-up, then the notified re-read
    finally:
        for replica in replicas:
            await stop_redis_store(replica)


async def test_redis_store_keeps_last_good_policy_when_an_invalid_one_is_stored(keys, sync_redis) -> None:
    sync_redis.set(keys.policy_current, make_policy(0.4).model_dump_json())
    sync_redis.incr(keys.policy_version)
    recorder = Recorder()
    store = await start_redis_store(REDIS_URL, keys, recorder)
    try:
        good = store.current
        assert good is not None
        # Someone bypasses `cascade policy push` and stores garbage.
        sync_redis.set(keys.policy_current, "{not json")
        sync_redis.publish(keys.policy_updates, str(sync_redis.incr(keys.policy_version)))
        await wait_until(lambda: store.reload_failures == 1)
        await wait_for_checks(store, 2)  # periodic version checks later: still counted once
        assert store.reload_failures == 1 and len(recorder.failures) == 1
        assert store.current is good
        assert store.version == 1  # the version being served, not the rejected one
    finally:
        await stop_redis_store(store)


async def test_redis_store_catches_a_missed_notification_by_version_check(keys, sync_redis) -> None:
    sync_redis.set(keys.policy_current, make_policy(0.4).model_dump_json())
    store = await start_redis_store(REDIS_URL, keys)
    try:
        new = make_policy(0.8)
        sync_redis.set(keys.policy_current, new.model_dump_json())
        sync_redis.incr(keys.policy_version)  # no PUBLISH
        await wait_until(lambda: store.current.policy_id == new.policy_id, 2.5)
    finally:
        await stop_redis_store(store)


async def test_redis_outage_keeps_serving_last_good_policy_then_catches_up(keys, sync_redis) -> None:
    sync_redis.set(keys.policy_current, make_policy(0.4).model_dump_json())
    sync_redis.incr(keys.policy_version)
    link = RedisLink()
    await link.up()
    store = await start_redis_store(link.url, keys)
    try:
        good = store.current
        assert store.redis_up is True
        await link.down()
        await wait_until(lambda: store.redis_up is False)
        # Pushed while this replica cannot see Redis.
        new = make_policy(0.55)
        sync_redis.set(keys.policy_current, new.model_dump_json())
        sync_redis.publish(keys.policy_updates, str(sync_redis.incr(keys.policy_version)))
        await wait_for_checks(store, 2)  # the watcher tried again and still cannot see Redis
        assert store.current is good
        assert store.status()["redis_up"] is False
        await link.up()
        await wait_until(lambda: store.current.policy_id == new.policy_id, 3.0)
        assert store.redis_up is True
        assert store.reload_failures == 0  # an outage is not a bad policy
    finally:
        await stop_redis_store(store)
        await link.down()


async def test_redis_store_without_a_pushed_policy_is_not_ready_until_a_push(
    tmp_path: Path, keys, sync_redis
) -> None:
    store = await start_redis_store(REDIS_URL, keys)
    try:
        assert store.current is None
        assert "cascade policy push" in store.last_error
        path = tmp_path / "p.json"
        save_policy(make_policy(0.5), path)
        push_policy(sync_redis, load_policy(path), keys)
        await wait_until(lambda: store.current is not None, 1.0)
    finally:
        await stop_redis_store(store)


# ---------------------------------------------------------------- the watcher never dies

DEEP = "[" * 100_000 + "]" * 100_000


async def test_file_store_survives_a_hundred_thousand_deep_file_and_picks_up_the_next(file_store) -> None:
    store, path, _ = file_store
    good = store.current
    path.write_text(DEEP)
    await wait_until(lambda: store.reload_failures == 1)
    assert store.current is good and "nested too deeply" in store.last_error
    assert store.status()["watching"] is True
    fixed = make_policy(0.66)
    save_policy(fixed, path)
    await wait_until(lambda: store.current.policy_id == fixed.policy_id)


async def test_file_store_refuses_an_edit_that_keeps_the_policy_id(file_store) -> None:
    store, path, recorder = file_store
    good = store.current
    document = good.model_dump(mode="json")
    document["tiers"]["balanced"]["routes"][0]["thresholds"] = [0.99]  # id left as it was
    path.write_text(json.dumps(document))
    await wait_until(lambda: store.reload_failures == 1)
    assert store.current is good
    assert "does not match" in store.last_error and good.policy_id in store.last_error
    assert recorder.loaded == [good.policy_id]


async def test_redis_store_survives_deep_content_and_a_non_integer_version(
    tmp_path: Path, keys, sync_redis
) -> None:
    path = tmp_path / "p.json"
    save_policy(make_policy(0.4), path)
    push_policy(sync_redis, load_policy(path), keys)
    recorder = Recorder()
    store = await start_redis_store(REDIS_URL, keys, recorder)
    try:
        good = store.current
        sync_redis.set(keys.policy_current, DEEP)
        sync_redis.publish(keys.policy_updates, str(sync_redis.incr(keys.policy_version)))
        await wait_until(lambda: store.reload_failures == 1)
        assert store.current is good and "nested too deeply" in store.last_error
        # A version that is not an integer: recorded, the (valid) content still served by content.
        sync_redis.set(keys.policy_current, good.model_dump_json())
        sync_redis.set(keys.policy_version, "seven")
        await wait_until(lambda: store.reload_failures == 2, 2.5)
        assert "not an integer" in store.last_error and store.current.policy_id == good.policy_id
        await wait_for_checks(store, 2)  # resyncs of the same content and version: not counted again
        assert store.reload_failures == 2 and len(recorder.failures) == 2
        assert store.status()["watching"] is True
        # The watcher is alive: the next push (which repairs the version) is served.
        new = make_policy(0.77)
        save_policy(new, path)
        assert push_policy(sync_redis, load_policy(path), keys) == 1
        await wait_until(lambda: store.current.policy_id == new.policy_id, 2.0)
        assert store.version == 1 and store.last_error is None
    finally:
        await stop_redis_store(store)


async def test_redis_store_starting_against_deep_content_starts_not_ready(keys, sync_redis) -> None:
    sync_redis.set(keys.policy_current, DEEP)
    sync_redis.set(keys.policy_version, "x")
    store = await start_redis_store(REDIS_URL, keys)
    try:
        assert store.current is None and store.reload_failures == 1
        sync_redis.set(keys.policy_current, make_policy(0.3).model_dump_json())
        await wait_until(lambda: store.current is not None, 2.5)
    finally:
        await stop_redis_store(store)


async def test_redis_store_switches_when_content_changes_under_the_same_version(keys, sync_redis) -> None:
    """Redis lost its data and the version restarted at the number this replica already serves."""
    first, second = make_policy(0.4), make_policy(0.6)
    sync_redis.set(keys.policy_current, first.model_dump_json())
    sync_redis.set(keys.policy_version, 1)
    store = await start_redis_store(REDIS_URL, keys)
    try:
        assert store.current.policy_id == first.policy_id and store.version == 1
        pipe = sync_redis.pipeline(transaction=True)  # wiped and re-pushed between two checks
        pipe.delete(keys.policy_current, keys.policy_version)
        pipe.set(keys.policy_current, second.model_dump_json())
        pipe.set(keys.policy_version, 1)
        pipe.execute()
        await wait_until(lambda: store.current.policy_id == second.policy_id, 2.5)
        assert store.version == 1 and store.reload_failures == 0
    finally:
        await stop_redis_store(store)


async def test_an_unexpected_error_in_the_watcher_is_recorded_and_the_watcher_goes_on(
    keys, sync_redis, monkeypatch
) -> None:
    sync_redis.set(keys.policy_current, make_policy(0.4).model_dump_json())
    store = await start_redis_store(REDIS_URL, keys)
    real_parse = policy_store.parse_policy
    failures = iter([RuntimeError("a bug")])

    def flaky_parse(raw: Any, source: str = "") -> Policy:
        for exc in failures:
            raise exc
        return real_parse(raw, source=source)

    monkeypatch.setattr(policy_store, "parse_policy", flaky_parse)
    try:
        good = store.current
        new = make_policy(0.45)
        sync_redis.set(keys.policy_current, new.model_dump_json())
        await wait_until(lambda: store.reload_failures == 1, 2.5)
        assert "RuntimeError: a bug" in store.last_error and store.current is good
        sync_redis.set(keys.policy_current, make_policy(0.46).model_dump_json())
        await wait_until(lambda: store.current.tiers["balanced"].routes[0].thresholds == [0.46], 2.5)
    finally:
        await stop_redis_store(store)

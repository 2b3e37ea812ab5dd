"""Client and admin keys: hashed storage, environment and Redis sources, open mode, 401 bodies."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis

from gateway.commands.keys import add_key, revoke_key
from gateway.keys.auth import Authenticator, hash_key, key_id_of
from gateway.keys.auth_throttle import AuthFailureThrottle
from gateway.wire.errors import AuthenticationError, AuthThrottledError, AuthUnavailableError
from tests.support.shared_redis import RedisLink


async def test_environment_key_is_accepted_and_identified_by_a_short_hash() -> None:
    auth = Authenticator(env_keys=["sk-alpha", "sk-beta"], default_limit_usd=2.5)
    await auth.start()
    identity = await auth.authenticate("Bearer sk-beta")
    assert identity.key_id == key_id_of(hash_key("sk-beta"))
    assert "sk-beta" not in identity.key_id and len(identity.key_id) == 16
    assert identity.limit_usd == 2.5
    assert not auth.is_open


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic sk-alpha", "Bearer sk-wrong", "sk-alpha"])
async def test_missing_or_wrong_key_is_a_401_in_openai_shape(header: str | None) -> None:
    auth = Authenticator(env_keys=["sk-alpha"])
    await auth.start()
    with pytest.raises(AuthenticationError) as caught:
        await auth.authenticate(header)
    body = caught.value.body()
    assert caught.value.status == 401
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert "sk-wrong" not in body["error"]["message"]


@pytest.mark.parametrize(
    ("header", "reason"),
    [(None, "missing"), ("Basic sk-alpha", "missing"), ("Bearer", "missing"), ("Bearer sk-wrong", "unknown")],
)
async def test_a_refused_key_is_reported_with_its_reason_and_the_client_never_the_key(
    header: str | None, reason: str
) -> None:
    reported: list[tuple[str, str | None]] = []
    auth = Authenticator(env_keys=["sk-alpha"], on_failure=lambda *failure: reported.append(failure))
    await auth.start()
    with pytest.raises(AuthenticationError):
        await auth.authenticate(header, {"client": ("203.0.113.7", 51234)})
    await auth.authenticate("Bearer sk-alpha", {"client": ("203.0.113.7", 51235)})  # accepted: not reported
    assert reported == [(reason, "203.0.113.7:51234")]


async def test_gateway_without_keys_is_open_when_configured_and_says_so_once(caplog) -> None:
    auth = Authenticator(api_keys_env="CASCADE_API_KEYS", allow_open=True)
    with caplog.at_level("WARNING", logger="cascade.auth"):
        await auth.start()
    assert auth.is_open
    assert [r.message for r in caplog.records if "OPEN" in r.message] != []
    assert len([r for r in caplog.records if "OPEN" in r.message]) == 1
    identity = await auth.authenticate(None)
    assert identity.key_id is None
    assert (await auth.authenticate("Bearer anything")).key_id is None


async def test_without_keys_and_without_auth_open_every_request_is_refused_and_logged(caplog) -> None:
    auth = Authenticator(api_keys_env="CASCADE_API_KEYS")
    with caplog.at_level("WARNING", logger="cascade.auth"):
        await auth.start()
        assert not auth.is_open
        for header in (None, "Bearer anything", "Bearer none"):
            with pytest.raises(AuthenticationError):
                await auth.authenticate(header)
    said = [r.message for r in caplog.records if "auth.open is false" in r.message]
    assert len(said) == 1  # at start; the refusals right after are not logged again (once a minute)
    assert "every request is refused" in said[0]


async def test_an_emptied_key_store_does_not_open_a_fresh_replica(keys, sync_redis, async_redis) -> None:
    """Redis lost its data: a replica that starts against the empty key hash refuses everyone."""
    key, _ = add_key(sync_redis, "team-a", None, keys)
    sync_redis.delete(keys.client_keys)
    auth = Authenticator(redis=async_redis, keys=keys)
    await auth.start()
    assert not auth.is_open
    for header in (None, f"Bearer {key}"):
        with pytest.raises(AuthenticationError):
            await auth.authenticate(header)


async def test_redis_key_added_by_the_cli_is_accepted_with_its_limit(keys, sync_redis, async_redis) -> None:
    key, key_id = add_key(sync_redis, "team-a", 1.25, keys)
    stored = sync_redis.hgetall(keys.client_keys)
    assert list(stored) == [hash_key(key)]  # only the hash is stored
    assert key not in json.dumps(stored)
    auth = Authenticator(redis=async_redis, keys=keys, default_limit_usd=9.0)
    await auth.start()
    assert not auth.is_open
    identity = await auth.authenticate(f"Bearer {key}")
    assert (identity.key_id, identity.limit_usd, identity.name) == (key_id, 1.25, "team-a")


async def test_redis_key_without_a_limit_gets_the_default_limit(keys, sync_redis, async_redis) -> None:
    key, _ = add_key(sync_redis, "team-b", None, keys)
    auth = Authenticator(redis=async_redis, keys=keys, default_limit_usd=9.0)
    await auth.start()
    assert (await auth.authenticate(f"Bearer {key}")).limit_usd == 9.0


async def test_open_gateway_closes_when_the_first_key_is_added(keys, sync_redis, async_redis) -> None:
    auth = Authenticator(redis=async_redis, keys=keys, cache_ttl_s=0.0, allow_open=True)
    await auth.start()
    assert auth.is_open
    key, _ = add_key(sync_redis, "first", None, keys)
    with pytest.raises(AuthenticationError):
        await auth.authenticate(None)
    assert (await auth.authenticate(f"Bearer {key}")).name == "first"
    revoke_key(sync_redis, "first", keys)  # removing every key does not reopen the gateway
    with pytest.raises(AuthenticationError):
        await auth.authenticate(f"Bearer {key}")
    with pytest.raises(AuthenticationError):
        await auth.authenticate(None)


async def test_revoked_key_is_refused_after_the_cache_expires(keys, sync_redis, async_redis) -> None:
    now = [0.0]
    key, _ = add_key(sync_redis, "soon-gone", None, keys)
    auth = Authenticator(redis=async_redis, keys=keys, cache_ttl_s=5.0, clock=lambda: now[0])
    await auth.start()
    await auth.authenticate(f"Bearer {key}")
    revoke_key(sync_redis, "soon-gone", keys)
    await auth.authenticate(f"Bearer {key}")  # still cached
    now[0] += 5.1
    with pytest.raises(AuthenticationError):
        await auth.authenticate(f"Bearer {key}")


async def test_cached_key_survives_a_redis_outage_and_unknown_keys_get_503(keys, sync_redis) -> None:
    key, _ = add_key(sync_redis, "cached", None, keys)
    other, _ = add_key(sync_redis, "never-seen", None, keys)
    link = RedisLink()
    await link.up()
    client = aioredis.from_url(
        link.url, decode_responses=True, socket_connect_timeout=0.5, socket_timeout=0.5
    )
    now = [0.0]
    auth = Authenticator(redis=client, keys=keys, cache_ttl_s=1.0, clock=lambda: now[0])
    try:
        await auth.start()
        await auth.authenticate(f"Bearer {key}")
        await link.down()
        now[0] += 2.0  # cache entry expired, Redis unreachable: the stale entry still serves
        assert (await auth.authenticate(f"Bearer {key}")).name == "cached"
        with pytest.raises(AuthUnavailableError) as caught:
            await auth.authenticate(f"Bearer {other}")
        assert caught.value.status == 503
    finally:
        await client.aclose()
        await link.down()


async def test_an_address_over_its_failure_count_still_gets_its_stored_key_checked_and_served(
    keys, sync_redis, async_redis
) -> None:
    """Behind one NAT: a guesser's wrong keys hold the shared address off, and a stored key used from
    it is still served after its cache entry lapsed (and one this replica never saw, too)."""
    now = [0.0]
    key, _ = add_key(sync_redis, "behind-the-nat", None, keys)
    fresh, _ = add_key(sync_redis, "first-seen-later", None, keys)
    throttle = AuthFailureThrottle(3, 60.0, clock=lambda: now[0])
    auth = Authenticator(
        redis=async_redis, keys=keys, cache_ttl_s=5.0, clock=lambda: now[0], throttle=throttle
    )
    await auth.start()
    nat = {"client": ("198.51.100.20", 40000)}
    assert (await auth.authenticate(f"Bearer {key}", nat)).name == "behind-the-nat"
    for i in range(3):
        with pytest.raises(AuthenticationError):
            await auth.authenticate(f"Bearer sk-guess-{i}", nat)
    with pytest.raises(AuthThrottledError) as held:
        await auth.authenticate("Bearer sk-guess-again", nat)
    assert held.value.headers["retry-after"] == "60"
    now[0] += 5.1  # the key's cache entry lapsed; the address is held off for 55 s more
    assert throttle.held_off_s("198.51.100.20") > 0
    assert (await auth.authenticate(f"Bearer {key}", nat)).name == "behind-the-nat"
    assert (await auth.authenticate(f"Bearer {fresh}", nat)).name == "first-seen-later"
    revoke_key(sync_redis, "behind-the-nat", keys)
    now[0] += 5.1  # a revoked key is refused like any wrong one once its cache entry lapsed
    with pytest.raises(AuthThrottledError):
        await auth.authenticate(f"Bearer {key}", nat)


def test_admin_key_is_checked_and_admin_is_disabled_without_one() -> None:
    auth = Authenticator(env_keys=["sk-client"], admin_key="sk-admin", admin_key_env="CASCADE_ADMIN_KEY")
    auth.check_admin("Bearer sk-admin")
    for header in (None, "Bearer sk-client", "Bearer sk-admin2"):
        with pytest.raises(AuthenticationError):
            auth.check_admin(header)
    disabled = Authenticator(admin_key_env="CASCADE_ADMIN_KEY")
    with pytest.raises(AuthenticationError) as caught:
        disabled.check_admin("Bearer sk-admin")
    assert "CASCADE_ADMIN_KEY" in caught.value.message

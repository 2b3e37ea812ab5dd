"""RedisBatcher: the commands of one event-loop iteration reach Redis as one pipeline, each with its
own reply or error; a script Redis forgot is loaded and run once; a silent Redis fails the batch in time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.redis.batch import LuaScript, RedisBatcher, ScriptSlots, pack_commands
from tests.support.shared_redis import REDIS_URL, RedisLink


@pytest.fixture
async def named_client() -> AsyncIterator[tuple[aioredis.Redis, str]]:
    """A client whose connections carry a unique name, so CLIENT LIST can count them."""
    name = f"batch-test-{uuid.uuid4().hex[:10]}"
    client = aioredis.from_url(REDIS_URL, decode_responses=True, client_name=name)
    yield client, name
    await client.aclose()


async def connections_named(observer: aioredis.Redis, name: str) -> int:
    return sum(1 for entry in await observer.client_list() if entry.get("name") == name)


async def test_commands_of_one_iteration_share_one_connection_and_keep_their_own_replies(
    keys: Any, named_client: tuple[aioredis.Redis, str], async_redis: aioredis.Redis
) -> None:
    client, name = named_client
    batcher = RedisBatcher(client, timeout_s=2.0)
    fields = {f"f{i}": f"v{i}" for i in range(40)}
    await async_redis.hset(keys.client_keys, mapping=fields)
    replies = await asyncio.gather(*(batcher.execute("HGET", keys.client_keys, f) for f in fields))
    assert replies == list(fields.values())
    assert await connections_named(async_redis, name) == 1  # one pipeline, one connection

    # The same forty commands sent one by one concurrently need a connection each.
    await asyncio.gather(*(client.hget(keys.client_keys, f) for f in fields))
    assert await connections_named(async_redis, name) > 1


async def test_an_error_reply_fails_only_its_own_command(keys: Any, async_redis: aioredis.Redis) -> None:
    batcher = RedisBatcher(async_redis, timeout_s=2.0)
    await async_redis.set(keys.spend_epoch, "a string")
    good = batcher.execute("GET", keys.spend_epoch)
    bad = batcher.execute("HGET", keys.spend_epoch, "field")  # WRONGTYPE
    also_good = batcher.execute("INCRBY", keys.spend("k", 0), 5)
    results = await asyncio.gather(good, bad, also_good, return_exceptions=True)
    assert results[0] == "a string" and results[2] == 5
    assert isinstance(results[1], ResponseError) and "WRONGTYPE" in str(results[1])


async def test_a_script_redis_does_not_know_is_loaded_and_runs_exactly_once(
    keys: Any, async_redis: aioredis.Redis
) -> None:
    batcher = RedisBatcher(async_redis, timeout_s=2.0)
    counter = keys.spend("k", 0)
    # A script text no Redis has seen (as after a restart, which forgets every script).
    script = LuaScript.of(f"-- {uuid.uuid4().hex}\nreturn redis.call('INCRBY', KEYS[1], tonumber(ARGV[1]))")
    assert not (await async_redis.script_exists(script.sha))[0]
    assert await batcher.run_script(script, [counter], [3]) == 3
    assert await batcher.run_script(script, [counter], [4]) == 7  # known now: EVALSHA alone
    assert int(await async_redis.get(counter)) == 7


async def test_a_silent_redis_fails_every_command_of_the_batch_within_the_timeout() -> None:
    release = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(1 << 20)  # take the commands, answer nothing (a frozen Redis)
        await release.wait()
        writer.close()

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = aioredis.from_url(f"redis://127.0.0.1:{port}/0", decode_responses=True)
    batcher = RedisBatcher(client, timeout_s=0.2)
    try:
        # A hang guard, not a time bound: the server never answers, so only the batcher's own
        # timeout can end these calls, and it must end every one of them.
        results = await asyncio.wait_for(
            asyncio.gather(*(batcher.execute("GET", f"k{i}") for i in range(5)), return_exceptions=True), 30
        )
        assert not release.is_set() and writers  # the server took the commands and still holds them
        assert all(isinstance(r, RedisTimeoutError) for r in results)
        assert len({id(r) for r in results}) == 5  # each caller raises its own exception
    finally:
        await client.aclose()
        release.set()
        server.close()
        await server.wait_closed()
        for writer in writers:
            await writer.wait_closed()


async def test_an_unreachable_redis_is_a_connection_error_for_every_command() -> None:
    link = RedisLink()
    await link.up()
    await link.down()  # nothing listens on its port any more
    client = aioredis.from_url(link.url, decode_responses=True, socket_connect_timeout=0.5)
    batcher = RedisBatcher(client, timeout_s=1.0)
    try:
        results = await asyncio.gather(*(batcher.execute("PING") for _ in range(3)), return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results)
    finally:
        await client.aclose()


async def test_a_caller_that_stops_waiting_leaves_the_others_their_replies(
    keys: Any, async_redis: aioredis.Redis
) -> None:
    batcher = RedisBatcher(async_redis, timeout_s=2.0)
    counter = keys.spend("k", 0)

    async def incr() -> int:
        return int(await batcher.execute("INCR", counter))

    first, second = asyncio.create_task(incr()), asyncio.create_task(incr())
    await asyncio.sleep(0)  # both queued
    first.cancel()
    assert await second in (1, 2)
    assert int(await async_redis.get(counter)) == 2  # the cancelled caller's command was sent anyway


async def test_commands_answered_before_a_timeout_keep_their_replies(keys: Any) -> None:
    client = aioredis.from_url(REDIS_URL, decode_responses=True)
    batcher = RedisBatcher(client, timeout_s=0.3)
    counter = keys.spend("k", 0)
    try:
        results = await asyncio.gather(
            batcher.execute("INCR", counter),
            batcher.execute("BLPOP", keys.spend_pending("k", 0), 2),  # blocks past the timeout
            batcher.execute("INCR", counter),
            return_exceptions=True,
        )
        assert results[0] == 1  # it ran and its reply arrived: not reported as a failure
        assert isinstance(results[1], RedisTimeoutError) and isinstance(results[2], RedisTimeoutError)
    finally:
        await client.aclose()


def test_script_slots_bind_each_slot_to_a_local_of_its_name_and_name_where_the_lists_start() -> None:
    slots = ScriptSlots(keys=("counter",), args=("amount", "limit")) + ScriptSlots(args=("window_count",))
    assert slots.lua().splitlines() == [
        "local counter = KEYS[1]",
        "local amount = ARGV[1]",
        "local limit = ARGV[2]",
        "local window_count = ARGV[3]",
        "local keys_end, args_end = 1, 3",
    ]
    assert slots.args_of(window_count=2, limit=10, amount=1) == [1, 10, 2]  # packed by name


@pytest.mark.parametrize(
    "named", [{"amount": 1}, {"amount": 1, "limit": 2, "extra": 3}, {"amount": 1, "limt": 2}]
)
def test_script_slots_refuse_arguments_that_are_not_exactly_their_names(named: dict[str, int]) -> None:
    with pytest.raises(TypeError):
        ScriptSlots(args=("amount", "limit")).args_of(**named)


def test_commands_are_packed_as_resp_bulk_strings_whatever_the_argument() -> None:
    # ASCII text and ints take the text route; other text, bytes, bools and int subclasses their own.
    commands = [("EVALSHA", "a" * 40, 2, "k", "ké", b"\xff\x00", True, -5, 2**63 - 1), ("PING",), ()]
    expected = b"".join(
        [
            b"*9\r\n$7\r\nEVALSHA\r\n$40\r\n" + b"a" * 40 + b"\r\n$1\r\n2\r\n$1\r\nk\r\n$3\r\nk\xc3\xa9\r\n",
            b"$2\r\n\xff\x00\r\n$1\r\n1\r\n$2\r\n-5\r\n$19\r\n9223372036854775807\r\n",
            b"*1\r\n$4\r\nPING\r\n*0\r\n",
        ]
    )
    assert pack_commands(commands) == expected
    with pytest.raises(TypeError):
        pack_commands([("SET", "k", 1.5)])  # type: ignore[list-item]

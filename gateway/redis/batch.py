"""Request-path Redis commands sent together: one pipeline per event-loop iteration.

Every keyed request talks to Redis twice (the spend reservation before its upstream call, the
settlement after it), and a key lookup when its cache entry has expired. Sent one by one through
redis-py, each command costs a pooled connection, a write, a read and their timeouts (in Python
3.11 redis-py wraps every write of a client with ``socket_timeout`` in a new task), which made Redis
the largest part of what a keyed request costs beyond an unkeyed one (docs/benchmarks.md).

``RedisBatcher`` queues the commands issued while the event loop runs its ready callbacks and sends
them, at the next iteration, as one non-transactional pipeline: one pooled connection, one write,
one round trip for every request that reached Redis in that iteration, under one timeout. Each
command is still executed by Redis on its own and in order (a pipeline is not a transaction), and
each caller gets its own reply or error, so what a command does is unchanged: the spend scripts
keep their op ids, pending hashes and epoch check (gateway.keys.spend_store). The batch is packed here
(``pack_commands``; a caller may hand a command packed already, ``run_packed``) and sent on a
connection of the client's pool, without redis-py's pipeline object, whose per-command packing and
bookkeeping cost more than the round trip they share; its replies are read in one pass
(gateway.redis.resp) where the connection allows, and the connection is kept for the next pipeline
(up to ``_IDLE_CONNECTIONS``) rather than going through the pool's lock, checks and release events
each time.

Failures: a pipeline that does not complete within ``timeout_s`` fails every command in it with
``redis.exceptions.TimeoutError``; a connection error fails them with
``redis.exceptions.ConnectionError``; an error reply (``ResponseError``) fails only its command.
Like a single command that timed out, a timed-out pipeline may still execute later (a frozen Redis
runs what was queued when it resumes); the spend store's idempotent operations are built for that.

Lua scripts run by ``EVALSHA``; a script Redis does not know (``NOSCRIPT``: nothing ran) is loaded
and its command sent again, within the same timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.redis.resp import fast_connection, read_replies

Arg = str | int | bytes
# Connections a batcher keeps between its pipelines: as many as are usually in flight at once.
_IDLE_CONNECTIONS = 4


@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script and its SHA-1 (what ``EVALSHA`` names it by)."""

    text: str
    sha: str

    @classmethod
    def of(cls, text: str) -> LuaScript:
        """The script ``text`` with its SHA-1 computed here (no Redis call)."""
        return cls(text, hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest())


@dataclass(frozen=True, slots=True)
class ScriptSlots:
    """The fixed ``KEYS`` and ``ARGV`` of a Lua script, by name.

    A script made of fragments from several modules starts with ``lua()``, which binds each slot
    to a Lua local of its name (``local spend_key = KEYS[1]``) and names where the lists after the
    fixed slots start (``keys_end``, ``args_end``: ``KEYS[keys_end + i]``); its caller fills the
    slots by name (``keys_of``, ``args_of``). So no fragment and no caller counts positions, and
    a fragment that reads a slot of another module's part names it. ``+`` appends one part's slots
    to another's.
    """

    keys: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    def __add__(self, other: ScriptSlots) -> ScriptSlots:
        return ScriptSlots(self.keys + other.keys, self.args + other.args)

    def lua(self) -> str:
        """The Lua prelude binding every slot to a local of its name, and the lists' starts."""
        lines = [f"local {name} = KEYS[{i}]" for i, name in enumerate(self.keys, 1)]
        lines += [f"local {name} = ARGV[{i}]" for i, name in enumerate(self.args, 1)]
        lines.append(f"local keys_end, args_end = {len(self.keys)}, {len(self.args)}")
        return "\n".join(lines) + "\n"

    def keys_of(self, **named: str) -> list[str]:
        """The fixed ``KEYS``, in order, from one value per slot name (exactly these names)."""
        return _in_order(self.keys, named)

    def args_of(self, **named: Arg) -> list[Arg]:
        """The fixed ``ARGV``, in order, from one value per slot name (exactly these names)."""
        return _in_order(self.args, named)


def _in_order(names: tuple[str, ...], named: dict[str, Any]) -> list[Any]:
    # As many values as slots, each slot found: exactly these names (no generator per call: this
    # runs for every script call of the request path).
    if len(named) == len(names):
        try:
            return [named[name] for name in names]
        except KeyError:
            pass
    raise TypeError(f"script slots {names} given {tuple(named)}")


@dataclass(slots=True)
class _Command:
    args: tuple[Arg, ...] | bytes  # bytes: packed already
    future: asyncio.Future[Any]
    script: LuaScript | None = None


class RedisBatcher:
    """Sends the commands issued in one event-loop iteration as one pipeline (see the module doc).

    ``timeout_s`` bounds each pipeline (None: unbounded, for clients whose own socket timeouts
    bound them).
    """

    def __init__(self, redis: Redis, timeout_s: float | None):
        self.redis = redis
        self.timeout_s = timeout_s
        self._queue: list[_Command] = []
        # Pipelines in flight: the loop keeps only weak references to tasks.
        self._sending: set[asyncio.Task[None]] = set()
        # Connections kept between pipelines (``_put_back``), at most ``_IDLE_CONNECTIONS``.
        self._idle: list[AbstractConnection] = []

    @classmethod
    def wrap(cls, redis: Redis | RedisBatcher, timeout_s: float | None) -> RedisBatcher:
        """``redis`` itself if it is a batcher already (shared by several users), else a new one."""
        return redis if isinstance(redis, RedisBatcher) else cls(redis, timeout_s)

    def execute(self, *args: Arg) -> asyncio.Future[Any]:
        """Queue one command (``"HGET", name, field``); await the result for its reply.

        Commands queued before the caller's next ``await`` go out in the same pipeline, in order.
        """
        return self._queue_command(args, None)

    def run_script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> asyncio.Future[Any]:
        """Queue ``EVALSHA`` of ``script`` with ``keys`` and ``args``; await the result for its reply."""
        return self._queue_command(("EVALSHA", script.sha, len(keys), *keys, *args), script)

    def run_packed(self, script: LuaScript, command: bytes) -> asyncio.Future[Any]:
        """Queue ``EVALSHA`` of ``script`` packed already (``evalsha_head`` and the ``bulks`` of its
        keys and arguments: the parts that do not change between calls are packed once by the
        caller); await the result for its reply."""
        return self._queue_command(command, script)

    def _queue_command(self, args: tuple[Arg, ...] | bytes, script: LuaScript | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            # Runs after the callbacks that are ready now: every request the loop is serving in this
            # iteration adds its commands first.
            loop.call_soon(self._flush)
        self._queue.append(_Command(args, future, script))
        return future

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        if not batch:
            return
        task = asyncio.get_running_loop().create_task(self._send(batch), name="redis-batch")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[_Command]) -> None:
        replies: list[Any] = []  # in the order of ``batch``, as they are read
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._pipeline([command.args for command in batch], replies)
                unknown = [
                    i
                    for i, reply in enumerate(replies)
                    if isinstance(reply, NoScriptError) and batch[i].script is not None
                ]
                if unknown:
                    await self._load_and_resend(batch, replies, unknown)
        except BaseException as exc:
            # The commands answered before the failure keep their replies: they did run.
            _answer(batch, replies, exc)
            if not isinstance(exc, Exception):
                raise  # cancelled (the loop is closing): the unanswered callers were cancelled
            return
        _answer(batch, replies, None)

    async def _load_and_resend(self, batch: list[_Command], replies: list[Any], unknown: list[int]) -> None:
        """Load the scripts Redis did not know (restarted or flushed) and resend their commands, in
        one pipeline (``SCRIPT LOAD`` runs before the commands after it); their new replies replace
        the ``NOSCRIPT`` ones in ``replies``, and those still unanswered if this fails are marked so."""
        scripts = {s.sha: s for s in (batch[i].script for i in unknown) if s is not None}
        loads: list[tuple[Arg, ...] | bytes] = [("SCRIPT", "LOAD", s.text) for s in scripts.values()]
        again: list[Any] = []
        try:
            await self._pipeline(loads + [batch[i].args for i in unknown], again)
        finally:
            for j, i in enumerate(unknown):
                k = len(loads) + j
                replies[i] = again[k] if k < len(again) else _UNANSWERED

    async def _pipeline(self, commands: list[tuple[Arg, ...] | bytes], replies: list[Any]) -> None:
        """Send ``commands`` in one write and append their replies to ``replies`` in order (an error
        reply as its exception), so a failure part-way leaves the replies read before it.

        What redis-py's own pipeline does, on the same pool: a connection that fails or is cancelled
        mid-way is disconnected before it goes back to the pool, so no stale reply is ever read by
        the next batch. The replies are read in one pass (gateway.redis.resp) where the connection
        allows it, else by redis-py one by one.
        """
        connection = await self._connection()
        fast = fast_connection(connection)
        clean = False
        try:
            await connection.send_packed_command(pack_commands(commands))
            if fast:
                await read_replies(connection, len(commands), replies)
            else:
                for _ in commands:
                    try:
                        replies.append(await connection.read_response())
                    except ResponseError as error:  # an error reply: the connection is still in step
                        replies.append(error)
            clean = True
        except BaseException:
            if fast:  # what read_response does on a failed read (send_packed_command does it itself)
                await connection.disconnect(nowait=True)
            raise
        finally:
            await self._put_back(connection, clean and fast)

    async def _connection(self) -> AbstractConnection:
        """A connection for one pipeline: one this batcher kept from its last pipelines if the server
        has not closed it, else one from the client's pool (which checks it)."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            reader = getattr(connection, "_reader", None)
            if reader is not None and not reader.at_eof():
                return connection
            await self.redis.connection_pool.release(connection)
        return await self.redis.connection_pool.get_connection()

    async def _put_back(self, connection: AbstractConnection, keep: bool) -> None:
        """Keep a connection whose pipeline read every reply (the next pipeline skips the pool's lock,
        checks and release events: a connection it holds stays in the pool's in-use set, so closing
        the client still closes it); any other goes back to the pool."""
        if keep and len(self._idle) < _IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            await self.redis.connection_pool.release(connection)


# A command whose reply never arrived (its pipeline failed before).
_UNANSWERED: Any = object()


def _answer(batch: list[_Command], replies: list[Any], failure: BaseException | None) -> None:
    """Give each waiting caller its reply, or, if none arrived, ``failure``."""
    for i, command in enumerate(batch):
        if command.future.done():
            continue  # its caller stopped waiting (cancelled)
        reply = replies[i] if i < len(replies) else _UNANSWERED
        if reply is _UNANSWERED:
            assert failure is not None
            _fail(command.future, failure)
        elif isinstance(reply, Exception):
            command.future.set_exception(reply)
        else:
            command.future.set_result(reply)


def pack_commands(commands: Sequence[Sequence[Arg] | bytes]) -> bytes:
    """``commands`` in the Redis protocol (RESP arrays of bulk strings), as one buffer; a command
    given as ``bytes`` is packed already (``RedisBatcher.run_packed``) and taken as it is.

    The request path's arguments (key names, ids, digits) are ASCII text and integers: they are
    formatted as text and encoded once per command (a character is then a byte, so the text's length
    is the bulk string's); any other argument is packed on its own (``_bulk``).
    """
    parts: list[bytes] = []
    for command in commands:
        if type(command) is bytes:
            parts.append(command)
            continue
        parts.append(f"*{len(command)}\r\n".encode())
        parts.append(bulks(*command))
    return b"".join(parts)


def bulks(*args: Arg) -> bytes:
    """``args`` as consecutive RESP bulk strings, without the array's header: a run of a command's
    arguments packed once and reused by every call (``evalsha_head``, ``RedisBatcher.run_packed``)."""
    parts: list[bytes] = []
    text: list[str] = []
    for arg in args:
        if type(arg) is int:  # not a subclass (a bool's text is not its digits)
            digits = str(arg)
            text.append(f"${len(digits)}\r\n{digits}\r\n")
        elif isinstance(arg, str) and type(arg) is str and arg.isascii():
            text.append(f"${len(arg)}\r\n{arg}\r\n")
        else:
            parts.append("".join(text).encode())
            parts.append(_bulk(arg))
            text = []
    parts.append("".join(text).encode())
    return b"".join(parts)


def evalsha_head(script: LuaScript, keys: int, args: int) -> bytes:
    """The packed start of ``EVALSHA`` of ``script`` with ``keys`` keys and ``args`` arguments: the
    bulk strings of the keys and then the arguments follow it (made once per script and shape)."""
    return f"*{3 + keys + args}\r\n".encode() + bulks("EVALSHA", script.sha, keys)


def _bulk(arg: Arg) -> bytes:
    """One argument as a RESP bulk string (any text, bytes, an int subclass)."""
    if isinstance(arg, str):
        data = arg.encode()
    elif isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, int):
        data = b"%d" % arg
    else:
        raise TypeError(f"a Redis argument must be str, bytes or int, not {type(arg).__name__}")
    return b"$%d\r\n%b\r\n" % (len(data), data)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    """Fail ``future`` with its own exception object (one instance raised in many tasks would collect
    all their tracebacks): a timeout, a connection error, or ``exc`` itself if it is neither."""
    if not isinstance(exc, Exception):
        future.cancel()
    elif isinstance(exc, TimeoutError | RedisTimeoutError):
        future.set_exception(RedisTimeoutError("Redis did not answer in time"))
    elif isinstance(exc, RedisError | OSError):
        error = RedisConnectionError(f"Redis pipeline failed: {type(exc).__name__}: {exc}")
        error.__cause__ = exc
        future.set_exception(error)
    else:
        future.set_exception(exc)

"""The event-loop stall a client's JSON Schema and the answer it steers cause, through `cascade serve`.

One real gateway process (no Redis) in front of the scripted upstream of the tests
(tests/support/scripted_upstream.py), which answers each request with the answer its schema
matches. While a request runs, a probe GETs ``/healthz`` every 50 ms; a case prints the slowest probe
(the stall every other client of the replica saw), the request's status and time. Each case runs
``--repeat`` times, each schema with a fresh nonce in its ``description`` (no compiled schema is
reused).

The audit's cases, one per carrier:

* ``unique_items`` (chat ``response_format``): ``uniqueItems`` over 1,500 distinct objects;
* ``enum`` (chat tool ``parameters``): 400 items against a 20,000-value ``enum``;
* ``defs`` (Responses ``text.format``): 8,000 ``$defs``;
* ``any_of`` (Messages ``input_schema``): a 6,000-branch ``anyOf``.

The largest schemas the limits accept (policies/schema_limits.py), with answers as large as the
check's budget allows and past it:

* ``limit_nodes``: 5,000 subschemas (1,000 ``$defs``) in 8 tools, the answer calling all 8;
* ``limit_any_of``: 256 branches, 2,000 items matching the last one;
* ``limit_steps``: the most work per step found: 255 failing ``oneOf`` branches, 2,000 items;
* ``limit_paths``: ``anyOf`` refs doubling to 1,022 in-place paths, 300 items;
* ``limit_patterns``: 32 patterns never seen before (two ``[a-z]{1,999}``), about 4,550 RE2 instructions;
* ``limit_enum``: a 5,000-value ``enum``, 20,000 items;
* ``limit_unique``: ``uniqueItems`` over 5,000 objects.

First the slowest probe of an idle second (``idle``): the probe's own time on the machine.

Run it against any checkout (``--code``, default this one: the gateway process runs that code):

    .venv/bin/python bench/gateway/schema_stall.py [--code /path/to/checkout] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

PROBE_EVERY_S = 0.05
KEY = "sk-bench-schemas"


@dataclass(frozen=True)
class Case:
    """One request (``path``, ``body(nonce)``) and the upstream answer its schema matches."""

    name: str
    path: str
    body: Callable[[str], dict[str, Any]]
    reply: Callable[[], Any]


def _described(schema: dict[str, Any], nonce: str) -> dict[str, Any]:
    return {**schema, "description": f"request {nonce}"}


def chat_format(schema: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """A chat request whose ``response_format`` carries ``schema``."""
    return lambda nonce: {
        "model": "cascade/direct",
        "messages": [{"role": "user", "content": "Return the items."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "items", "schema": _described(schema, nonce)},
        },
    }


def chat_tools(schemas: list[dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """A chat request declaring one tool per schema (``f0``, ``f1``, ...)."""
    return lambda nonce: {
        "model": "cascade/direct",
        "messages": [{"role": "user", "content": "Call the tools."}],
        "tools": [
            {"type": "function", "function": {"name": f"f{i}", "parameters": _described(s, nonce)}}
            for i, s in enumerate(schemas)
        ],
    }


def responses_format(schema: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """A Responses request whose ``text.format`` carries ``schema``."""
    return lambda nonce: {
        "model": "cascade/direct",
        "input": "Return the items.",
        "text": {"format": {"type": "json_schema", "name": "items", "schema": _described(schema, nonce)}},
    }


def messages_tool(schema: dict[str, Any]) -> Callable[[str], dict[str, Any]]:
    """A Messages request whose one tool's ``input_schema`` is ``schema``."""
    return lambda nonce: {
        "model": "cascade/direct",
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": "Call the tool."}],
        "tools": [{"name": "f0", "input_schema": _described(schema, nonce)}],
    }


def content(value: Any) -> Callable[[], Any]:
    """An answer whose content is ``value`` as JSON."""
    from tests.support.scripted_upstream import ok

    return lambda: ok(orjson.dumps(value).decode(), confidence=None, usage=(10, 1000))


def calls(*arguments: Any) -> Callable[[], Any]:
    """An answer calling ``f0``, ``f1``, ... with ``arguments``."""
    from tests.support.scripted_upstream import Reply

    tool_calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": f"f{i}", "arguments": orjson.dumps(a).decode()},
        }
        for i, a in enumerate(arguments)
    ]
    return lambda: Reply(content=None, tool_calls=tool_calls, confidence=None, usage=(10, 1000))


def _array(items: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"items": {"type": "array", "items": items, **more}}}


def _branches(count: int) -> dict[str, Any]:
    kinds = [
        {"type": "object", "properties": {"kind": {"const": f"k{i}"}}, "required": ["kind"]}
        for i in range(count)
    ]
    return {"anyOf": kinds}


def _defs_schema(count: int, per_def: int) -> dict[str, Any]:
    props = {f"p{j}": {"type": "string"} for j in range(per_def)}
    defs = {f"d{i}": {"type": "object", "properties": props} for i in range(count)}
    return {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}}


def _doubling(links: int) -> dict[str, Any]:
    """``l0 -> anyOf[l1, l1] -> ... -> string``: 2^links in-place paths at ``l0``."""
    defs: dict[str, Any] = {f"l{i}": {"anyOf": [{"$ref": f"#/$defs/l{i + 1}"}] * 2} for i in range(links)}
    defs[f"l{links}"] = {"type": "string"}
    return {**_array({"$ref": "#/$defs/l0"}), "$defs": defs}


def _fresh_patterns(nonce: str) -> dict[str, Any]:
    """32 patterns new to the replica (``nonce`` in each), about 4,550 RE2 instructions together."""
    big = {f"b{i}": {"type": "string", "pattern": f"^[a-z]{{1,999}}{nonce}{i}$"} for i in range(2)}
    small = {f"s{i}": {"type": "string", "pattern": f"^[a-z]{{1,5}}{nonce}{i}$"} for i in range(30)}
    return {"type": "object", "properties": {**big, **small}}


def cases() -> list[Case]:
    """The audit's cases, then the largest schemas the limits accept."""
    enum_values = [f"value-{i}" for i in range(20_000)]
    small_enum = enum_values[:5_000]
    return [
        Case(
            "unique_items",
            "/v1/chat/completions",
            chat_format(_array({"type": "object"}, uniqueItems=True)),
            content({"items": [{"id": i, "name": f"item-{i}"} for i in range(1_500)]}),
        ),
        Case(
            "enum",
            "/v1/chat/completions",
            chat_tools([_array({"enum": enum_values})]),
            calls({"items": enum_values[-400:]}),
        ),
        Case("defs", "/v1/responses", responses_format(_defs_schema(8_000, 1)), content({"x": {"p0": "a"}})),
        Case(
            "any_of",
            "/v1/messages",
            messages_tool({"type": "object", "properties": {"item": _branches(6_000)}}),
            calls({"item": {"kind": "k5999"}}),
        ),
        Case(
            "limit_nodes",
            "/v1/chat/completions",
            chat_tools([_defs_schema(124, 4) for _ in range(8)]),
            calls(*[{"x": {"p0": "a"}}] * 8),
        ),
        Case(
            "limit_any_of",
            "/v1/chat/completions",
            chat_format(_array(_branches(256))),
            content({"items": [{"kind": "k255"}] * 2_000}),
        ),
        Case(
            "limit_steps",
            "/v1/chat/completions",
            chat_format(_array({"oneOf": [{"not": {}}] * 255 + [{"type": "integer"}]})),
            content({"items": [1] * 2_000}),
        ),
        Case("limit_paths", "/v1/responses", responses_format(_doubling(8)), content({"items": ["a"] * 300})),
        Case(
            "limit_patterns",
            "/v1/chat/completions",
            lambda nonce: chat_format(_fresh_patterns(nonce[:6]))(nonce),
            content({"b0": "a" * 900}),
        ),
        Case(
            "limit_enum",
            "/v1/chat/completions",
            chat_format(_array({"enum": small_enum})),
            content({"items": small_enum[::-1] * 4}),
        ),
        Case(
            "limit_unique",
            "/v1/messages",
            messages_tool(_array({"type": "object"}, uniqueItems=True)),
            calls({"items": [{"id": i} for i in range(5_000)]}),
        ),
    ]


async def _probe(client: httpx.AsyncClient, done: asyncio.Event, worst: list[float]) -> None:
    while not done.is_set():
        started = time.perf_counter()
        with contextlib.suppress(httpx.TimeoutException):  # a stall past the timeout: counted as is
            await client.get("/healthz")
        worst.append(time.perf_counter() - started)
        await asyncio.sleep(PROBE_EVERY_S)


async def idle(url: str) -> dict[str, Any]:
    """The slowest probe of one second without requests."""
    probes: list[float] = []
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=120) as probe:
        task = asyncio.create_task(_probe(probe, done, probes))
        await asyncio.sleep(1.0)
        done.set()
        await task
    return {"case": "idle", "worst_stall_ms": round(max(probes) * 1000, 1)}


def loop_cpu_s(pid: int) -> float:
    """CPU seconds the replica's main thread (its event loop) has run: a measure the machine's load
    does not inflate, unlike the probes' wall clock."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


async def measure(url: str, pid: int, case: Case, upstream: Any, repeat: int) -> dict[str, Any]:
    """Send ``case`` ``repeat`` times with the probe running: the slowest probe, the most event-loop
    CPU one request took (its parsing, the probes' answers and all), statuses, times."""
    probes: list[float] = []
    statuses: list[int] = []
    seconds: list[float] = []
    cpu: list[float] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as probe,
        httpx.AsyncClient(timeout=120, headers={"authorization": f"Bearer {KEY}"}) as client,
    ):
        for _ in range(repeat):
            upstream.reset()
            upstream.script("up-large", case.reply())
            done = asyncio.Event()
            task = asyncio.create_task(_probe(probe, done, probes))
            body = orjson.dumps(case.body(uuid.uuid4().hex))
            headers = {"content-type": "application/json"}
            started, cpu_before = time.perf_counter(), loop_cpu_s(pid)
            response = await client.post(url + case.path, content=body, headers=headers)
            seconds.append(time.perf_counter() - started)
            cpu.append(loop_cpu_s(pid) - cpu_before)
            statuses.append(response.status_code)
            done.set()
            await task
    return {
        "case": case.name,
        "worst_stall_ms": round(max(probes) * 1000, 1),
        "loop_cpu_ms": round(max(cpu) * 1000, 1),
        "statuses": sorted(set(statuses)),
        "request_s": round(max(seconds), 2),
    }


def _invalid_answers(replica: Any) -> float:
    """Answers the replica found failing a structural check (a schema, or the check's budget)."""
    return sum(
        replica.sample("cascade_invalid_answers_total", model="large", check=check)
        for check in ("invalid_tool_call", "invalid_structured_output")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--only", nargs="*", help="case names to run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    code = args.code.resolve()
    sys.path[:0] = [str(code), str(code / "tests" / "reliability")]
    os.environ["PYTHONPATH"] = str(code)
    from processes import write_gateway_config  # type: ignore[import-not-found]

    from tests.support.gateway_process import GatewayProcess
    from tests.support.policy_files import write_policy
    from tests.support.scripted_upstream import ScriptedUpstream

    upstream = ScriptedUpstream()
    upstream.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            config = write_gateway_config(
                directory,
                upstream_base_url=upstream.base_url,
                policy=write_policy(directory / "policy.json"),
                limits={"max_body_bytes": 4_194_304, "request_timeout_s": 120},
            )
            replica = GatewayProcess(config, env={"CASCADE_API_KEYS": KEY}).start()
            try:
                replica.wait_ready()
                print(f"code: {code}", flush=True)
                print(asyncio.run(idle(replica.url)), flush=True)
                for case in cases():
                    if not args.only or case.name in args.only:
                        before = _invalid_answers(replica)
                        result = asyncio.run(measure(replica.url, replica.pid, case, upstream, args.repeat))
                        result["answers_failing_a_check"] = int(_invalid_answers(replica) - before)
                        print(result, flush=True)
            finally:
                replica.stop()
    finally:
        upstream.stop()


if __name__ == "__main__":
    main()

"""Fuzzing the HTTP surface: whatever a client sends, the answer is never >= 500 and every error is
an OpenAI error object.

One `cascade serve` process (keys and spend in the real Redis) in front of the scripted upstream;
hypothesis generates bodies (JSON of random shapes, wrong types, deep nesting, huge numbers, odd
unicode, broken bytes) and headers (X-Cascade-*, Authorization, Content-Type), plus raw requests
with a wrong Content-Length.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.redis.keys import RedisKeys
from policies import build_policy, save_policy
from tests.support.gateway_testkit import POLICY_DOCUMENT, model_configs
from tests.support.ports import free_port
from tests.support.scripted_upstream import ScriptedUpstream
from tests.support.shared_redis import REDIS_URL, delete_prefix

CASCADE = str(Path(sys.executable).with_name("cascade"))
CLIENT_KEY = "sk-fuzz-client"
PLAIN_HEAD = b'{"model": "cascade", "messages": [{"role": "user", "content": "x"}], '
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
PATHS = ("/v1/chat/completions", "/v1/completions")
ERROR_FIELDS = {"message", "type", "param", "code"}


@dataclass
class FuzzedGateway:
    """The `cascade serve` process under test."""

    url: str
    port: int


@pytest.fixture(scope="module")
def fuzz_gateway(
    scripted_upstream_server: ScriptedUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FuzzedGateway]:
    """`cascade serve` (a process of its own, so it does not share the GIL with hypothesis) for the
    whole module; keys and spend in the real Redis under a private prefix."""
    keys = RedisKeys(f"cascade-fuzz-{uuid.uuid4().hex[:10]}")
    work = tmp_path_factory.mktemp("fuzz")
    document = {k: v for k, v in POLICY_DOCUMENT.items() if k != "policy_id"}
    save_policy(build_policy(document), work / "policy.json")
    config = {
        "models": model_configs(scripted_upstream_server.base_url),
        "policy": "policy.json",
        "redis_url": REDIS_URL,
        "budgets": {"limit_usd": 1000.0, "window_s": 3600},
        "limits": {"max_body_bytes": 65536, "request_timeout_s": 10, "header_timeout_s": 5},
        "logging": {"level": "error"},
    }
    (work / "gateway.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    env.update(CASCADE_REDIS_PREFIX=keys.prefix, CASCADE_API_KEYS=CLIENT_KEY)
    log = (work / "gateway.log").open("wb")
    process = subprocess.Popen(
        [CASCADE, "serve", "--config", str(work / "gateway.yaml"), "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while not _answers(url + "/readyz"):
            assert process.poll() is None, (work / "gateway.log").read_text()
            assert time.monotonic() < end, "cascade serve did not become ready"
            time.sleep(0.1)
        scripted_upstream_server.reset()
        yield FuzzedGateway(url, port)
        assert process.poll() is None, "the gateway died under fuzzing"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        finally:
            if process.poll() is None:
                process.kill()
            log.close()
            delete_prefix(keys)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def http(fuzz_gateway: FuzzedGateway) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fuzz_gateway.url, timeout=20) as client:
        yield client


# ---------------------------------------------------------------- strategies

# Unicode including astral characters, controls and lone surrogates (escaped in JSON by json.dumps).
odd_text = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=20)
huge_ints = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.sampled_from([2**63 - 1, 2**64 - 1, 2**64, -(2**63)])
)
scalars = st.one_of(
    st.none(), st.booleans(), huge_ints, st.floats(allow_nan=False, allow_infinity=False), odd_text
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(odd_text, inner, max_size=4)),
    max_leaves=8,
)
models = st.one_of(
    st.sampled_from(["cascade", "cascade/balanced", "cascade/gold", "small", "large", "nope"]),
    odd_text,
    json_values,
)
messages = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.one_of(st.sampled_from(["user", "system", "assistant"]), json_values)},
            optional={"content": st.one_of(odd_text, json_values)},
        ),
        max_size=3,
    ),
    json_values,
)
FIELDS = {
    "stream": st.one_of(st.booleans(), json_values),
    "n": st.one_of(st.integers(-2, 4), json_values),
    "max_tokens": st.one_of(huge_ints, json_values),
    "max_completion_tokens": st.one_of(huge_ints, json_values),
    "temperature": st.one_of(st.floats(allow_nan=False), json_values),
    "logprobs": st.one_of(st.booleans(), st.integers(-1, 25), json_values),
    "top_logprobs": st.one_of(st.integers(-1, 25), json_values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_values}), json_values),
    "prompt": st.one_of(odd_text, st.lists(st.integers(0, 50_000), max_size=5), json_values),
    "seed": st.one_of(huge_ints, json_values),
}


@st.composite
def chat_like_bodies(draw: st.DrawFn) -> bytes:
    """Mostly plausible requests with random values and types in the fields the gateway reads."""
    body: dict[str, Any] = {"model": draw(models), "messages": draw(messages)}
    for name in draw(st.sets(st.sampled_from(sorted(FIELDS)), max_size=4)):
        body[name] = draw(FIELDS[name])
    for name in draw(st.sets(st.sampled_from(["model", "messages"]), max_size=1)):
        del body[name]
    return json.dumps(body).encode()


@st.composite
def nested_bodies(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(1, 1500))
    opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = opener * depth + b"1" + closer * depth
    return PLAIN_HEAD + b'"extra": ' + inner + b"}"


@st.composite
def number_bodies(draw: st.DrawFn) -> bytes:
    """Numbers as raw text: beyond 64 bits, beyond float range, exponent forms."""
    number = draw(
        st.sampled_from(
            [b"1e400", b"-1e400", b"1" + b"0" * 400, b"18446744073709551616", b"-0", b"1E-400", b"0.1e99999"]
        )
    )
    field = draw(st.sampled_from([b"max_tokens", b"n", b"temperature", b"seed", b"top_logprobs"]))
    return PLAIN_HEAD + b'"' + field + b'": ' + number + b"}"


bodies = st.one_of(
    chat_like_bodies(),
    json_values.map(lambda value: json.dumps(value).encode()),
    nested_bodies(),
    number_bodies(),
    st.binary(max_size=64),
    chat_like_bodies().flatmap(lambda raw: st.integers(0, len(raw)).map(lambda cut: raw[:cut])),
    odd_text.map(lambda text: text.encode("utf-8", "surrogatepass")),
)

# What an HTTP client can put in a header value: visible ASCII, spaces inside, Latin-1 above 0xA0.
header_text = st.text(
    st.one_of(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E),
        st.characters(min_codepoint=0xA0, max_codepoint=0xFF),
    ),
    max_size=40,
).map(lambda value: value.strip(" "))
cost_header = st.one_of(
    st.floats().map(repr), st.sampled_from(["nan", "inf", "-0", "1e400", "0x10", "", "0.001"]), header_text
)
tier_header = st.one_of(st.sampled_from(["balanced", "chain", "direct", "mix", "gold", ""]), header_text)
auth_header = st.one_of(
    st.just(f"Bearer {CLIENT_KEY}"),
    st.just(f"bearer   {CLIENT_KEY}"),
    st.just("Bearer"),
    st.just("Basic abc"),
    header_text,
)
headers = st.fixed_dictionaries(
    {"authorization": st.one_of(st.just(f"Bearer {CLIENT_KEY}"), auth_header)},
    optional={
        "x-cascade-max-cost-usd": cost_header,
        "x-cascade-tier": tier_header,
        "content-type": st.one_of(st.just("application/json"), header_text),
    },
)


# ---------------------------------------------------------------- checks


def assert_openai_error(status: int, raw: bytes) -> None:
    document = json.loads(raw)
    assert set(document) == {"error"}, raw[:300]
    error = document["error"]
    assert set(error) == ERROR_FIELDS, raw[:300]
    assert isinstance(error["message"], str) and error["message"], raw[:300]
    assert "Traceback" not in error["message"]
    assert error["code"] != "internal_error", raw[:300]


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.content[:300])
    if response.status_code >= 400:
        assert_openai_error(response.status_code, response.content)
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]" and '"error"' in line:
                event = json.loads(line[6:])
                if "error" in event:
                    assert set(event["error"]) == ERROR_FIELDS and event["error"]["code"] != "internal_error"


# ---------------------------------------------------------------- the fuzz tests


@settings(
    max_examples=2000,
    deadline=None,
    suppress_health_check=SLOW_OK,
)
@given(path=st.sampled_from(PATHS), body=bodies, request_headers=headers)
def test_no_body_or_header_gets_a_5xx_or_a_non_openai_error(
    http: httpx.Client, path: str, body: bytes, request_headers: dict[str, str]
) -> None:
    latin1 = {name: value.encode("latin-1") for name, value in request_headers.items()}
    check(http.post(path, content=body, headers=latin1))


def raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` on a fresh connection, half-close, and read whatever comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=chat_like_bodies(),
    declared=st.one_of(
        st.integers(-5, 70_000).map(str), st.sampled_from(["abc", "", "1e3", "0x10", "99999999999999999999"])
    ),
    duplicate=st.booleans(),
)
def test_a_wrong_content_length_gets_no_5xx(
    fuzz_gateway: FuzzedGateway, body: bytes, declared: str, duplicate: bool
) -> None:
    lengths = f"content-length: {declared}\r\n" * (2 if duplicate else 1)
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {CLIENT_KEY}\r\n"
        f"content-type: application/json\r\n{lengths}connection: close\r\n\r\n"
    ).encode() + body
    answer = raw_exchange(fuzz_gateway.port, request)
    if not answer:
        return  # the body never completed (more declared than sent): the connection just ends
    head, _, payload = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert status < 500, answer[:300]
    if status >= 400:
        assert_openai_error(status, payload)


def test_the_fuzzed_gateway_is_still_healthy(fuzz_gateway: FuzzedGateway, http: httpx.Client) -> None:
    """Runs after the fuzz tests in this module: nothing leaked into a broken state."""
    response = http.post(
        "/v1/chat/completions",
        json={"model": "cascade", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert response.status_code == 200, response.text
    assert http.get("/metrics").status_code == 200
